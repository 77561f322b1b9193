"""View chains of a specialized run as one `_reinterpret_tensor` call each.

Attention in a transformer block is mostly views between library calls: the fused QKV
projection is reshaped, sliced three ways, each slice reshaped to heads and permuted, and the
output permuted and reshaped back. A specialized run called each as an ATen op, through the
dispatcher, every call. At fixed sizes the layout a chain ends in is fixed too, so a
specialized run can make the final view directly from the chain's root, an order of magnitude
cheaper: `torch._C._dynamo.guards._reinterpret_tensor(root, size, stride, offset)` (what
Inductor's generated code calls), a tensor on the root's storage (docs/performance.md, "View
chains as one `_reinterpret_tensor`").

The layout comes from running the chain once on a meta tensor laid out as the root (view ops
have C++ meta kernels: no torch._dynamo import, which a runtime-only artifact load must not
pay). A root whose layout the run knows (an input, which the guards check is contiguous, or a
buffer the run allocates) needs nothing more; any other root (an extern call's result) is laid
out as in the general run just before, checked per call (`root.stride() == ...`), and the
chain itself runs when the check fails.

A program output is reinterpreted too when its root is the run's own (neither a program input
nor itself returned): a training forward returns its saved activations as views of its buffers
(attention's heads permuted), and AOTAutograd detaches every saved tensor that is an autograd
view, one more call each (160 a step in BERT base), as it does not for Inductor's reinterpreted
ones. The caller then gets no `_base` and no version counter shared with sibling views of that
buffer, as from Inductor; nothing outside the run holds the root itself. An output viewing an
input or another output stays an ATen view (eager's aliasing, which the caller may rely on).

Left as ATen calls: those outputs, views with several outputs or inputs, and chains that do
not stay views of their root (a reshape that copies).
"""

from __future__ import annotations

import torch

from pipec_ir import Ref, Step, get_attr
from pipec_ir.symbolic import contiguous_strides

from .exprs import compile_ints
from .steps import TORCH_DTYPES, ExternStep
from .memory import is_view_target

REINTERPRET = getattr(getattr(torch._C._dynamo, "guards", None), "_reinterpret_tensor", None)
_META = torch.device("meta")


class Reinterpret(ExternStep):
    """A step object of a specialized run: `outs[0]` made from value `root` by `chain` (the view
    calls it replaces, first to last), laid out as (size, stride, offset from the root's).
    `root_stride` is the stride the root must have for that (None: the run guarantees it)."""

    __slots__ = ("root", "size", "stride", "offset", "chain", "root_stride")

    def __init__(self, root: int, root_name: str, chain: list, layout: tuple, root_stride):
        last = chain[-1]
        self.root, self.chain, self.root_stride = root, chain, root_stride
        self.size, self.stride, self.offset = layout
        self.outs, self.contiguous = last.outs, (False,)
        self.name, self.op, self.args, self.kwargs = "aten.as_strided.default", None, [], []
        # what liveness and dead-view analysis read: the root in, the last view's value out
        self.ir = Step("extern", self.name, (root_name,), last.ir.outputs)


def collapse_view_chains(flat: list, runner, symvals: tuple, observed: dict, strides: list | None = None) -> list:
    """`flat` (the specialized run's step objects) with each view call whose chain from its root
    can be laid out statically replaced by a `Reinterpret`; the views in between are left for
    `drop_dead_views`, which drops those nothing else reads. `strides`: per program input, None
    or the strides it had (runner.input_strides), which the run's guards check."""
    if REINTERPRET is None:
        return flat
    layouts = _root_layouts(runner, symvals, observed, strides)
    names = {i: n for n, i in runner.index.items()}
    outputs = {i for i in runner.out_index if i is not None}
    # storages the caller sees apart from a view's output: the inputs and the values returned
    visible = outputs | {runner.index[b.name] for b in runner.program.inputs}
    chains: dict[int, tuple[int, list]] = {}  # view value -> (its root, the view calls from the root)
    out = []
    for objs, release in flat:
        kept = []
        for obj in objs:
            source = _view_source(obj, runner)
            if source is None:
                kept.append(obj)
                continue
            root, chain = chains.get(source, (source, []))
            chain = [*chain, obj]
            chains[obj.outs[0]] = (root, chain)
            collapsed = None
            if (obj.outs[0] not in outputs or root not in visible) and root in layouts:
                shape, stride, dtype, guaranteed = layouts[root]
                layout = _final_layout(root, chain, shape, stride, dtype, runner, symvals)
                if layout is not None:
                    collapsed = Reinterpret(root, names[root], chain, layout, None if guaranteed else stride)
            kept.append(collapsed or obj)
        out.append((kept, release))
    return _release_roots_later(out)


def _release_roots_later(flat: list) -> list:
    """A root released at a position before the last `Reinterpret` that reads it (it was released
    after the first view of its chain) is released at that reader's position instead."""
    last_read = {}
    for k, (objs, _) in enumerate(flat):
        for obj in objs:
            if isinstance(obj, Reinterpret):
                last_read[obj.root] = k
    moved: dict[int, list[int]] = {}
    out = []
    for k, (objs, release) in enumerate(flat):
        kept = [i for i in release if last_read.get(i, -1) <= k]
        for i in release:
            if last_read.get(i, -1) > k:
                moved.setdefault(last_read[i], []).append(i)
        out.append((objs, kept))
    return [(objs, [*release, *moved.get(k, ())]) for k, (objs, release) in enumerate(out)]


def _view_source(obj, runner) -> int | None:
    """The value a single-input, single-output view call reads (as its first argument), else None."""
    if type(obj) is not ExternStep or not is_view_target(obj.name) or len(obj.outs) != 1:
        return None
    inputs = obj.ir.inputs
    args = get_attr(obj.ir.attrs, "args", ()) or ()
    if len(inputs) != 1 or not args or not isinstance(args[0], Ref) or args[0].name != inputs[0]:
        return None
    return runner.index[inputs[0]]


def _root_layouts(runner, symvals, observed: dict, strides: list | None = None) -> dict[int, tuple]:
    """value -> (shape, stride, dtype, whether the run guarantees that layout): the program's
    inputs (guarded contiguous, or on the strides they had, those no kernel reads) and the
    buffers the run allocates (contiguous) for sure; other
    values (extern results) as the general run before this specialization saw them, which the
    specialized run checks per call (attention's output is [B, H, T, D] with the strides of
    [B, T, H, D])."""
    layouts = {i: (shape, tuple(stride), dtype, False) for i, (shape, stride, dtype) in observed.items()}
    names = {i: n for n, i in runner.index.items()}
    known = [*runner.program.inputs, *(runner.buffers[names[i]] for i in sorted(runner.allocated))]
    for k, buffer in enumerate(known):
        shape = tuple(compile_ints(buffer.type.shape, runner.symbols)(*symvals)) if buffer.type.shape else ()
        stride = tuple(int(s) for s in contiguous_strides([max(n, 1) for n in shape]))
        given = strides[k] if strides is not None and k < len(runner.program.inputs) else None
        if given is not None and k not in runner.dense_inputs:  # passed as the caller's tensor
            stride = tuple(given)
        layouts[runner.index[buffer.name]] = (shape, stride, TORCH_DTYPES[buffer.type.dtype], True)
    return layouts


def _final_layout(root: int, chain: list, shape, stride, dtype, runner, symvals) -> tuple | None:
    """(size, stride, storage offset) of the chain's result on a root laid out as given, or None
    when it is not a view of the root there (a reshape that copies, `.contiguous()` on a
    non-contiguous view) or a call fails on meta tensors."""
    base = torch.empty_strided(shape, stride, dtype=dtype, device=_META)
    vals = [None] * runner.nvals
    vals[root] = base
    try:
        for obj in chain:
            obj(vals, symvals, _META)
    except Exception:  # noqa: BLE001 - an op without a meta kernel keeps its ATen calls
        return None
    result = vals[chain[-1].outs[0]]
    if not isinstance(result, torch.Tensor) or (result is not base and result._base is not base):
        return None
    return tuple(result.shape), tuple(result.stride()), result.storage_offset()


__all__ = ["REINTERPRET", "Reinterpret", "collapse_view_chains"]
