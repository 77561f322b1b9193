"""Where a specialized run allocates its buffers, and which allocations it can skip.

A buffer of the memory plan's slots is allocated right before the step object that first
writes it (inside the picked alternative: a library GEMM's epilogue output is not allocated
while cuBLAS runs). Buffers of one slot share storage while one of them is live when the next
is first written (an in-place kernel writing over its dying input); once all are released the
next gets fresh storage, so memory eager has already freed is not held across the gap.

**Handing storage on.** Each allocation costs an allocator call on the host (~3 us through
`_empty_strided_cuda` on the H200's host): BERT base's training step made 757 of them per step
against Inductor's 439, whose generated code hands a dead buffer to the next one of its size
(`buf15 = buf4; del buf4  # reuse`). A specialized run does the same where it cannot raise the
peak: a storage released before a later buffer of the same shape and dtype (or, for a slot's
byte storage, the same size) is first written passes to it when holding it in between keeps
the memory in use at or below the run's peak without any passing. That memory is simulated
from the plan: the run's own storages, and its library calls' results at the sizes the general
run saw. A storage is released when its last buffer and the last view of any of its buffers
are (views keep their root's storage, as in memory.py's `lifetimes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from pipec_ir.symbolic import contiguous_strides

from .exprs import compile_ints
from .memory import buffer_nbytes, is_view_target, round_up
from .steps import TORCH_DTYPES, ExternStep, LaunchStep
from .views import Reinterpret

NEVER = (1 << 62, 0, 0)  # the release time of a storage an output (or an unknown reader) keeps


@dataclass
class _Storage:
    """One allocation of the run: a slot's run of buffers sharing storage, or a slot-less buffer."""
    members: list[int]
    name: str  # the variable holding it ("slot3", or the buffer's own for a slot-less one)
    signature: tuple  # what a storage must be to serve it: (shape, dtype) or ("bytes", n)
    alloc: tuple  # when it is allocated: (position, object index, 0)
    release: tuple = NEVER  # after which object its last buffer or view is released
    slotted: bool = True  # slot-less buffers take storage but give none (their name is the buffer's)
    source: _Storage | None = None  # the released storage it takes, None: allocated fresh
    takers: list = field(default_factory=list)


def allocation_lines(runner, flat, symvals, src, var, released: dict[tuple, list[int]],
                     observed: dict | None = None) -> dict[tuple, list[str]]:
    """{(position, object index): lines to emit before that object}: every buffer the run
    allocates, storage handed on where that keeps the peak (module docstring). `observed`: the
    layouts of library results in the general run ({value: (shape, stride, dtype)})."""
    observed = observed or {}
    first_write: dict[int, tuple[int, int]] = {}
    for k, (objs, _) in enumerate(flat):
        for j, obj in enumerate(objs):
            for i in getattr(obj, "allocates", getattr(obj, "writes", ())):
                if i in runner.allocated:
                    first_write.setdefault(i, (k, j))
    dies = {i: (k, len(flat[k][0]) if j is None else j) for (k, j), values in released.items() for i in values}
    by_index = {runner.index[b.name]: b for b in runner.program.buffers}
    slot_nbytes = {s.index: s.nbytes for s in runner.program.slots}

    def ints(exprs):
        return tuple(compile_ints(exprs, runner.symbols)(*symvals)) if exprs else ()

    storages, slots = [], {}
    for i, at in sorted(first_write.items(), key=lambda item: item[1]):
        b = by_index[i]
        if b.slot is None:
            sig = (ints(b.type.shape), TORCH_DTYPES[b.type.dtype])
            storages.append(_Storage([i], var[i], sig, (*at, 0), slotted=False))
        else:
            slots.setdefault(b.slot, []).append(i)
    for slot, members in sorted(slots.items()):
        for n, run in enumerate(_sharing_runs(members, first_write, dies)):
            bufs = [by_index[i] for i in run]
            if all(b.type == bufs[0].type for b in bufs):  # one typed tensor serves every buffer (common)
                sig = (ints(bufs[0].type.shape), TORCH_DTYPES[bufs[0].type.dtype])
            else:
                sig = ("bytes", round_up(max(ints([slot_nbytes[slot]] + [buffer_nbytes(b) for b in bufs]))))
            storages.append(_Storage(run, f"slot{slot}" + (f"_{n}" if n else ""), sig, (*first_write[run[0]], 0)))
    _hand_on(storages, flat, dies, runner, observed)

    lines: dict[tuple, list[str]] = {}
    for s in storages:
        at = s.alloc[:2]
        name = s.name if s.source is None else _chain_root(s).name
        if s.source is None:
            shape, dtype = s.signature if s.signature[0] != "bytes" else ((s.signature[1],), torch.uint8)
            lines.setdefault(at, []).append(f"{name} = {empty_call(src, shape, dtype)}")
        if not s.slotted:
            if s.source is not None:
                lines.setdefault(at, []).extend([f"{s.name} = {name}", f"{name} = None"])
            continue
        for i in s.members:
            lines.setdefault(first_write[i], []).append(_bind_line(s, i, name, by_index, src, var, ints))
        if not s.takers:  # the end of a chain: the storage's own name goes, its buffers keep it
            lines[first_write[s.members[-1]]].append(f"{name} = None")
    return lines


def _chain_root(s: _Storage) -> _Storage:
    while s.source is not None:
        s = s.source
    return s


def _bind_line(s: _Storage, i: int, name: str, by_index, src, var, ints) -> str:
    if s.signature[0] != "bytes":
        return f"{var[i]} = {name}"
    b = by_index[i]
    n = ints([buffer_nbytes(b)])[0]
    shape, dt = src.const("S", ints(b.type.shape)), src.const("D", TORCH_DTYPES[b.type.dtype])
    cut = "" if n == s.signature[1] else f"[:{n}]"
    return f"{var[i]} = {name}{cut}.view({dt}).view({shape})"


def _sharing_runs(members: list[int], first_write: dict, dies: dict) -> list[list[int]]:
    """A slot's buffers (in first-write order) cut into runs that must share storage: a buffer
    joins the current run when one of the run's buffers is still live at its first write."""
    runs: list[list[int]] = []
    for i in members:
        if runs and any(dies.get(m, (1 << 30, 0)) >= first_write[i] for m in runs[-1]):
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _hand_on(storages: list[_Storage], flat, dies: dict[int, tuple], runner, observed: dict) -> None:
    """Set `source` where a storage can take a released one without raising the run's peak.

    The run's memory over time is simulated: its storages from allocation to release, and the
    results of its library calls at the sizes the general run saw (`observed`). Taking a
    released storage holds it from its release to the taker's first write; that is accepted
    when the memory in use stays at or below the peak without any taking, at every moment of
    the hold. `dies`: value -> (position, object index) after which it is released."""
    release_time = {i: (*at, 2) for i, at in dies.items()}  # after that object's allocations (0) and call (1)
    root = _storage_roots(flat, runner)
    if root is None:  # a step object whose reads are not known: allocate everything fresh
        return
    held: dict[int, list[int]] = {}  # storage root value -> the values keeping it
    for value, r in root.items():
        held.setdefault(r, []).append(value)
    outputs = {i for i in runner.out_index if i is not None}

    def release_of(values: list[int]) -> tuple:
        return NEVER if outputs.intersection(values) else max(release_time.get(v, NEVER) for v in values)

    sizes = {id(s): _nbytes(s.signature) for s in storages}
    for s in storages:
        s.release = release_of([v for i in s.members for v in (i, *held.get(i, ()))])
    intervals = [(s.alloc, s.release, sizes[id(s)]) for s in storages]
    for k, j, outs in _library_results(flat):
        for o in outs:
            if o in observed:
                intervals.append(((k, j, 1), release_of([o, *held.get(o, ())]), _extent(*observed[o])))
    times = sorted({t for a, r, _ in intervals for t in (a, r)})
    at = {t: n for n, t in enumerate(times)}
    live = [0] * (len(times) + 1)
    for a, r, n in intervals:  # bytes in use from each allocation until its release
        live[at[a]] += n
        live[at[r]] -= n
    for n in range(1, len(live)):
        live[n] += live[n - 1]
    peak = max(live, default=0)
    free: list[_Storage] = []
    for s in sorted(storages, key=lambda s: s.alloc):
        n = sizes[id(s)]
        fits = [d for d in free if d.release < s.alloc and d.signature == s.signature
                and max(live[at[d.release]:at[s.alloc]], default=0) + n <= peak]
        if fits:
            d = max(fits, key=lambda d: d.release)  # the latest released: the shortest hold
            for m in range(at[d.release], at[s.alloc]):
                live[m] += n
            s.source = d
            d.takers.append(s)
            free.remove(d)
        if s.slotted and s.release != NEVER:
            free.append(s)


def _nbytes(signature: tuple) -> int:
    if signature[0] == "bytes":
        return int(signature[1])
    shape, dtype = signature
    n = 1
    for d in shape:
        n *= int(d)
    return n * dtype.itemsize


def _extent(shape, stride, dtype) -> int:
    """Bytes of the storage a tensor of this layout spans (0 when empty)."""
    if any(int(n) == 0 for n in shape):
        return 0
    return (1 + sum((int(n) - 1) * int(s) for n, s in zip(shape, stride))) * dtype.itemsize


def _storage_roots(flat, runner) -> dict[int, int] | None:
    """view value -> the value whose storage it shares (view externs, reinterpreted chains, launch
    outputs written over another value); None when a step object of unknown kind is present."""
    root: dict[int, int] = {}
    for objs, _ in flat:
        for obj in objs:
            if isinstance(obj, Reinterpret):
                root[obj.outs[0]] = root.get(obj.root, obj.root)
            elif isinstance(obj, LaunchStep):
                for out, donor, _, _ in obj.binds:
                    root[out] = root.get(donor, donor)
            elif isinstance(obj, ExternStep):
                if is_view_target(obj.name):
                    for name in obj.ir.inputs[:1]:
                        src = runner.index[name]
                        for out in obj.outs:
                            root[out] = root.get(src, src)
            else:
                return None
    return root


def _library_results(flat) -> list[tuple[int, int, tuple[int, ...]]]:
    """(position, index, outputs) of the library calls (not views): what they return is memory
    the run holds until those values are released."""
    out = []
    for k, (objs, _) in enumerate(flat):
        for j, obj in enumerate(objs):
            if type(obj) is ExternStep and not is_view_target(obj.name):
                out.append((k, j, obj.outs))
    return out


def empty_call(src, shape: tuple, dtype: torch.dtype) -> str:
    """An uninitialized contiguous tensor on the run's device: through the strided allocator
    Inductor's generated code uses where torch has it, several times cheaper per call than
    `torch.empty` (docs/performance.md, "Empty tensors through the strided allocator")."""
    s, d = src.const("S", tuple(shape)), src.const("D", dtype)
    if "EMPTY_STRIDED" in src.namespace:
        # torch's row-major strides: a size-0 dim counts as 1, as in torch.empty
        strides = tuple(int(x) for x in contiguous_strides([max(int(n), 1) for n in shape]))
        return f"EMPTY_STRIDED({s}, {src.const('T', strides)}, {d})"
    return f"EMPTY({s}, dtype={d}, device=DEV)"


def strided_allocator(device: torch.device):
    """torch's `empty_strided` for the current device of `device`'s type (what Inductor's
    generated code calls), or None where this torch lacks it."""
    guards = getattr(torch._C._dynamo, "guards", None)
    return getattr(guards, f"_empty_strided_{device.type}", None)


__all__ = ["allocation_lines", "empty_call", "strided_allocator"]
