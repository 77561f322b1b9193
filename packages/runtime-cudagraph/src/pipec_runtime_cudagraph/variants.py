"""The recorded variants of one graph key of the `cudagraph` runtime (cudagraph.py's docstring
says the policy): what a variant pins and copies, which outputs it hands out and whether the
caller still holds them, the variants of a key, and what one call brings to the choice."""

from __future__ import annotations

import weakref

import torch

use_count = torch._C._storage_Use_Count

# storage address -> the variant whose output lives there (inputs found there are pinned)
OWNED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def is_static_input(t: torch.Tensor) -> bool:
    """Always pinned: parameters, and tensors Dynamo marked static."""
    return isinstance(t, torch.nn.Parameter) or getattr(t, "_dynamo_static_input_type", None) is not None


class InputView:
    """An output that is a view of a pinned input (`x.T` returned as it is): rebuilt from the
    call's tensor, so that no graph keeps a reference to memory it does not own (a reference
    to another graph's output would count as the caller's and keep that graph `held`)."""

    __slots__ = ("index", "size", "stride", "offset")

    def __init__(self, index: int, view: torch.Tensor, base: torch.Tensor):
        self.index, self.size, self.stride = index, tuple(view.shape), tuple(view.stride())
        self.offset = view.storage_offset() - base.storage_offset()

    def of(self, x: torch.Tensor) -> torch.Tensor:
        return x.detach().as_strided_(self.size, self.stride, x.storage_offset() + self.offset)


class Variant:
    """One recorded variant of a key.

    `pinned`: input index -> (address, strides) it reads in place; `buffers`: input index ->
    its own input tensor (graph-sized); `outputs`: the graph's outputs at the key's sizes (an
    `InputView` for a view of a pinned input); `tracked`: (storage, use count the runtime
    accounts for) of each output storage the graph writes: the caller holds a tensor on it
    while the count is above that."""

    __slots__ = ("graph", "pinned", "buffers", "outputs", "private", "copied", "tracked", "statics", "__weakref__")

    def __init__(self, graph, pinned: dict, buffers: dict, outputs: list, private: bool, pinned_inputs: dict,
                 statics: dict | None = None):
        self.graph, self.pinned, self.buffers, self.private = graph, pinned, buffers, private
        self.statics = statics or {}  # input index -> weak reference to the static input's storage it pins
        views: dict[int, object] = {}
        storages: dict[int, object] = {}
        self.outputs = []
        self.copied: set[int] = set()  # ids of the outputs handed out as clones
        for t in outputs:
            if t is not None and id(t) not in views:
                s = t.untyped_storage()  # kept: one Python storage object per storage, counted below
                base = pinned_inputs.get(s.data_ptr()) if s.data_ptr() else None
                if base is not None and base[1].dtype == t.dtype:  # the caller's memory: no replay writes it
                    views[id(t)] = InputView(base[0], t, base[1])
                else:
                    views[id(t)] = t
                    if private or t.numel() <= 1:  # a loss: callers keep those (a list of losses), for free
                        self.copied.add(id(t))
                    else:
                        storages.setdefault(s._cdata, s)
            self.outputs.append(None if t is None else views[id(t)])
        self.tracked = [(s, use_count(s._cdata)) for s in storages.values()]
        for s, _ in self.tracked:
            if s.data_ptr():
                OWNED[s.data_ptr()] = self

    def accepts(self, ptrs: list, strides: list) -> bool:
        """Whether a call with these input addresses and strides (None: not usable in place)
        finds every pinned input where this graph reads it."""
        return all(ptrs[i] == p and strides[i] == s for i, (p, s) in self.pinned.items())

    def statics_moved(self, call: Call) -> bool:
        """Whether a static input this graph pins is somewhere else in `call`."""
        return any(i in self.pinned and self.pinned[i] != (call.ptrs[i], call.strides[i]) for i in call.static)

    def statics_gone(self) -> bool:
        """Whether a static input this graph pins no longer exists (a cache `generate` dropped)."""
        return any(ref.expired() for ref in self.statics.values())

    def held(self) -> bool:
        """Whether the caller still holds a tensor on one of this graph's outputs."""
        return any(use_count(s._cdata) > n for s, n in self.tracked)

    def hand_out(self, real: list, inputs: list) -> list:
        """The caller's outputs from the graph's (`real`: the same at the call's sizes): aliases,
        clones of the `copied` ones; an output returned twice is one tensor twice."""
        made: dict[int, torch.Tensor] = {}
        out = []
        for t, r in zip(self.outputs, real):
            if t is None:
                out.append(None)
                continue
            a = made.get(id(r))
            if a is None:
                a = r.of(inputs[r.index]) if isinstance(r, InputView) else r.detach()
                made[id(r)] = a = a.clone() if self.private or id(t) in self.copied else a
            out.append(a)
        return out

    def release(self) -> None:
        for s, _ in self.tracked:
            if OWNED.get(s.data_ptr()) is self:
                del OWNED[s.data_ptr()]


class Slot:
    """The variants of one graph key: `shared` (most recently used first) and `private`, how many
    were recorded (`moves`: those for static inputs that moved, past MAX_RECORDS), where the
    static inputs were at each shared variant's record (`placements`), and `last`: each input's address at the
    key's previous call (a list the generated replays update in place)."""

    __slots__ = ("shared", "private", "records", "private_records", "moves", "placements", "last")

    def __init__(self, n_inputs: int):
        self.shared: list[Variant] = []
        self.private: Variant | None = None
        self.records = 0
        self.private_records = 0
        self.moves = 0  # re-records past MAX_RECORDS because static inputs moved
        self.placements: set[tuple] = set()  # where the static inputs were at each record (`Call.placement`)
        self.last: list = [None] * n_inputs

    def graphs(self) -> list[Variant]:
        return self.shared + ([self.private] if self.private is not None else [])


class Call:
    """One call on the general path: the prepared inputs, sizes, and per input its address and
    strides where the caller's tensor can be read in place (else None), the inputs a new
    variant should pin (`want`) and the static ones."""

    __slots__ = ("prepared", "symvals", "values", "device", "ptrs", "strides", "want", "static")

    def __init__(self, runner, slot: Slot, inputs, prepared, symvals, values, device):
        self.prepared, self.symvals, self.values, self.device = prepared, symvals, values, device
        self.ptrs, self.strides, self.want, self.static = [], [], set(), set()
        own = set(map(id, slot.graphs()))
        for i, (t, p, shape) in enumerate(zip(inputs, prepared, runner.input_shapes)):
            if p is not t or tuple(p.shape) != tuple(shape(*values)):  # copied by `prepare`, or padded
                self.ptrs.append(None)
                self.strides.append(None)
                continue
            ptr = p.data_ptr()
            self.ptrs.append(ptr)
            self.strides.append(tuple(p.stride()))
            if is_static_input(p):
                self.static.add(i)
                self.want.add(i)
            elif ptr == slot.last[i]:
                self.want.add(i)
            else:
                producer = OWNED.get(p.untyped_storage().data_ptr())
                if producer is not None and id(producer) not in own:  # not fed back: `x = f(x)` alternates
                    self.want.add(i)

    def placement(self) -> tuple:
        """Where this call's static inputs are (index, address, strides)."""
        return tuple((i, self.ptrs[i], self.strides[i]) for i in sorted(self.static))
