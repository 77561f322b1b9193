"""Lowerings of the scatter family through `scatter` (docs/IR.md, "Indexing").

`scatter(self, pos, src; reduce)` is `self` with `src[p]` written (reduce "none") or
accumulated ("sum", "amax", "amin") at the row-major flat position `pos[p]` of self.
Positions are int64 arithmetic on `iota`s and index tensors, as for `take`:
scatter / scatter_add / scatter_reduce replace the `dim` coordinate of the index's own
point by the index value; index_put writes where index.Tensor would read;
embedding_dense_backward adds each gradient row into the row its token selects;
as_strided_scatter writes where as_strided would read (a backward's gradient of a strided view).

Accumulation runs as atomics, which exist for 32- and 64-bit types only: float16 and
bfloat16 accumulate in float32 (one rounding at the end, where eager on CUDA rounds at
every add: within the dtype's tolerance), 8- and 16-bit integers in int32 (a cast back
wraps as eager's arithmetic does). max/min are exact in any precision.
"""

from __future__ import annotations

import sympy
import torch

from pipec_ir import Ref
from pipec_ir.ops import SCATTER_REDUCES

from .builder import GraphBuilder, wrap_dim
from .dtypes import torch_dtype
from .lower_indexing import I64, advanced_index_coords, flat_position, iota, strided_positions, take
from .table import NoLowering, register

# eager's reduce names -> the IR's
_REDUCE = {"sum": "sum", "add": "sum", "amax": "amax", "amin": "amin"}
# the dtype atomics accumulate in
_ACCUMULATE_IN = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64",
                  "int8": "int32", "uint8": "int32", "int16": "int32", "int32": "int32", "int64": "int64"}


def scatter(cx: GraphBuilder, base: Ref, pos: Ref, src: Ref, reduce: str) -> Ref:
    """`base` with `src` (of pos's shape) written or accumulated at `pos`, in base's dtype.

    An accumulating scatter on a dtype without atomics runs in its accumulation dtype and
    is cast back."""
    dtype = cx.dtype(base)
    work = dtype if reduce == "none" else _ACCUMULATE_IN.get(dtype)
    if work is None:
        raise NoLowering(f"scatter with reduce={reduce} on {dtype}: no atomic for that dtype")
    out = cx.emit("scatter", [cx.cast(base, work), cx.cast(pos, I64), cx.cast(src, work)], cx.shape(base), work,
                  reduce=reduce)
    return cx.cast(out, dtype)


def _identity(reduce: str, dtype: str):
    """The value a position starts from when scatter_reduce leaves self out (include_self=False):
    the identity pipec_ir.ops.SCATTER_REDUCES names for `reduce`."""
    identity = SCATTER_REDUCES[reduce]
    if identity == "zero":
        return 0
    t = torch_dtype(dtype)
    if t.is_floating_point:
        return float("-inf") if identity == "lowest" else float("inf")
    return torch.iinfo(t).min if identity == "lowest" else torch.iinfo(t).max


def dim_positions(cx: GraphBuilder, self_shape, dim: int, index: Ref) -> Ref:
    """Flat positions in self of scatter along `dim`: the index's own point with its `dim`
    coordinate replaced by the index value."""
    shape = cx.shape(index)
    idx = cx.cast(index, I64)
    coords = [idx if d == dim else iota(cx, shape, d) for d in range(len(self_shape))]
    return flat_position(cx, coords, self_shape, shape)


def _src_at_index_points(cx: GraphBuilder, src, index: Ref, dtype: str) -> Ref:
    """src read at the index's points (src may be larger than the index in any dim), or a scalar."""
    shape = cx.shape(index)
    if not isinstance(src, Ref):
        return cx.full(src, shape, dtype)
    src = cx.cast(src, dtype)
    src_shape = _sizes(cx.shape(src))
    if _same_sizes(cx, src_shape, _sizes(shape)):
        return src
    coords = [iota(cx, shape, d) for d in range(len(src_shape))]
    return take(cx, src, flat_position(cx, coords, src_shape, shape), shape)


def _sizes(shape) -> tuple[sympy.Expr, ...]:
    return tuple(sympy.sympify(s) for s in shape)


def _same_size(cx: GraphBuilder, a, b) -> bool:
    """Equal sizes, as expressions or as sizes the trace's guards made equal (labels and logits
    are sized by different symbols)."""
    return a == b or cx.symbols.provably_equal(a, b)


def _same_sizes(cx: GraphBuilder, a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(_same_size(cx, x, y) for x, y in zip(a, b))


def _scatter_along(cx, x: Ref, dim, index: Ref, src, reduce: str, include_self: bool = True) -> Ref:
    """scatter / scatter_add / scatter_reduce of src into x along dim, in x's dtype. Sizes may be
    symbolic (a detector's box count): positions are then arithmetic on size expressions."""
    shape, dtype = cx.shape(x), cx.dtype(x)
    if include_self and reduce in ("none", "sum") and _one_write_per_line(cx, shape, dim, index):
        values = _values_per_line(cx, src, index, dtype)
        if values is not None:
            return _select_along(cx, x, wrap_dim(dim, len(shape)), index, values, reduce)
    self_shape = _sizes(shape)
    # an index empty when traced writes nothing; one that is empty only at run time (a difference
    # of sizes) gives the scatter an empty grid, which the runtime skips
    if any(s.is_zero for s in _sizes(cx.shape(index))):
        return cx.emit("identity", [x], shape, dtype)
    if len(cx.shape(index)) != len(self_shape):
        raise NoLowering("index rank differs from self's")
    dim = wrap_dim(dim, len(self_shape)) if self_shape else 0
    values = _src_at_index_points(cx, src, index, dtype)
    pos = dim_positions(cx, self_shape, dim, index)
    base = x
    if not include_self:  # the written positions start from the reduction's identity
        base = scatter(cx, base, pos, cx.full(_identity(reduce, dtype), cx.shape(pos), dtype), "none")
    return scatter(cx, base, pos, values, reduce)


def _one_write_per_line(cx: GraphBuilder, self_shape, dim: int, index: Ref) -> bool:
    """The index has self's shape but one element along `dim`: each line of self along `dim`
    receives exactly one write, and no two writes meet. Sizes compare as expressions, or as
    sizes the trace's guards made equal (labels and logits are sized by different symbols)."""
    shape = tuple(cx.shape(index))
    if not self_shape or len(shape) != len(self_shape):
        return False
    dim = wrap_dim(dim, len(self_shape))
    return shape[dim] == 1 and all(_same_size(cx, shape[d], self_shape[d]) for d in range(len(self_shape)) if d != dim)


def _values_per_line(cx: GraphBuilder, src, index: Ref, dtype: str) -> Ref | None:
    """What each line receives, of the index's shape: a scalar, or a src of the index's shape
    (None for a larger src, which the general path reads at the index's points)."""
    if not isinstance(src, Ref):
        return cx.full(src, cx.shape(index), dtype)
    return cx.cast(src, dtype) if tuple(cx.shape(src)) == tuple(cx.shape(index)) else None


def _select_along(cx: GraphBuilder, x: Ref, dim: int, index: Ref, values: Ref, reduce: str) -> Ref:
    """A scatter of one value per line as pointwise math: where(coordinate == index, value, x)
    (reduce "sum": x + that value there, 0 elsewhere). Unlike a scatter, its readers fuse with
    it: the gradient of a vocabulary loss (nll_loss_backward scatters -1 into zeros of the
    logits' shape) becomes part of the log-softmax backward's row kernel instead of a
    full-size buffer written and read again. An index out of range writes nothing (eager
    raises)."""
    shape, dtype = cx.shape(x), cx.dtype(x)
    hit = cx.pointwise("eq", [iota(cx, shape, dim), cx.broadcast(cx.cast(index, I64), shape)], shape, "bool",
                       operand_dtype=I64)
    spread = cx.broadcast(values, shape)
    if reduce == "none":
        return cx.emit("where", [hit, spread, x], shape, dtype)
    added = cx.emit("where", [hit, spread, cx.full(0, shape, dtype)], shape, dtype)
    return cx.emit("add", [x, added], shape, dtype)


def _self(cx, node, x) -> Ref:
    return cx.cast(x, cx.result(node).dtype)


@register("aten.scatter.src", "aten.scatter.value")
def lower_scatter(cx, node, x, dim, index, src):
    return _scatter_along(cx, _self(cx, node, x), dim, index, src, "none")


@register("aten.scatter.reduce", "aten.scatter.value_reduce")
def lower_scatter_reduce_legacy(cx, node, x, dim, index, src, *, reduce):
    if reduce != "add":
        raise NoLowering(f"scatter reduce={reduce!r}: Triton has no atomic multiply")
    return _scatter_along(cx, _self(cx, node, x), dim, index, src, "sum")


@register("aten.scatter_add.default")
def lower_scatter_add(cx, node, x, dim, index, src):
    return _scatter_along(cx, _self(cx, node, x), dim, index, src, "sum")


@register("aten.scatter_reduce.two")
def lower_scatter_reduce(cx, node, x, dim, index, src, reduce, *, include_self=True):
    if reduce == "mean":
        return _scatter_mean(cx, node, x, dim, index, src, include_self)
    if reduce not in _REDUCE:
        raise NoLowering(f"scatter_reduce {reduce!r}: Triton has no atomic multiply")
    if cx.dtype(x) == "bool":
        raise NoLowering(f"scatter_reduce {reduce!r} on bool")
    return _scatter_along(cx, _self(cx, node, x), dim, index, src, _REDUCE[reduce], include_self)


def _scatter_mean(cx, node, x, dim, index, src, include_self: bool) -> Ref:
    """sum / count where anything was scattered (count includes self when include_self), else self."""
    t = cx.result(node)
    if t.dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise NoLowering(f"scatter_reduce mean on {t.dtype} (integer division rounding)")
    if any(s.is_zero for s in _sizes(cx.shape(index))):
        return cx.emit("identity", [x], t.shape, t.dtype)
    work = _ACCUMULATE_IN[t.dtype]
    total = _scatter_along(cx, cx.cast(x, work), dim, index, src, "sum", include_self)
    count = _scatter_along(cx, cx.full(1 if include_self else 0, t.shape, work), dim, index, 1, "sum")
    mean = cx.pointwise("div", [total, cx.pointwise("maximum", [count, 1], t.shape, work)], t.shape, work)
    if not include_self:
        hit = cx.pointwise("gt", [count, 0], t.shape, "bool", operand_dtype=work)
        mean = cx.emit("where", [hit, mean, cx.cast(x, work)], t.shape, work)
    return cx.cast(mean, t.dtype)


@register("aten.index_put.default")
def lower_index_put(cx, node, x, indices, values, accumulate=False):
    """x with `values` (broadcast to x[indices]'s shape) written, or added, where x[indices] reads.
    Sizes may be symbolic (a KV cache's `index_copy_` at a dynamic length): positions are then
    arithmetic on size expressions, as index.Tensor's are."""
    t = cx.result(node)
    src_shape = tuple(sympy.sympify(s) for s in t.shape)
    if any(i is not None and cx.dtype(i) == "bool" for i in indices):
        raise NoLowering("boolean mask index (data-dependent shape)")
    coords, shape = advanced_index_coords(cx, src_shape, indices)
    if any(sympy.sympify(s).is_zero for s in shape):  # empty when traced; empty at run time: an empty grid
        return cx.emit("identity", [x], t.shape, t.dtype)
    pos = flat_position(cx, coords, src_shape, shape)
    return scatter(cx, cx.cast(x, t.dtype), pos, cx.operand(values, shape, t.dtype), "sum" if accumulate else "none")


@register("aten.as_strided_scatter.default")
def lower_as_strided_scatter(cx, node, x, src, size, stride, storage_offset=None):
    """x with src written over `x.as_strided(size, stride, storage_offset)`: one write per
    element of src, at the row-major position in x that as_strided reads it from
    (`strided_positions`). A view that covers an element twice has no one answer (eager's
    copy into it picks one): it stays an extern call."""
    sizes, strides = [cx.static(n) for n in size], [cx.static(s) for s in stride]
    reach = 0  # the farthest storage offset the smaller strides' dims reach
    for n, st in sorted(((n, st) for n, st in zip(sizes, strides) if n > 1), key=lambda p: p[1]):
        if st <= reach:
            raise NoLowering(f"as_strided_scatter into an overlapping view (sizes {sizes}, strides {strides})")
        reach += (n - 1) * st
    shape = tuple(cx.shape(src))
    pos = strided_positions(cx, node.args[0], x, shape, stride, storage_offset)
    return scatter(cx, x, pos, cx.cast(src, cx.dtype(x)), "none")


@register("aten.embedding_dense_backward.default")
def lower_embedding_dense_backward(cx, node, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """A zero [num_weights, D] gradient with every grad row added into its token's row; the
    padding row gets nothing; scale_grad_by_freq divides each row by its token's count."""
    t = cx.result(node)
    weight_shape = tuple(sympy.sympify(s) for s in t.shape)  # sizes may be symbolic (the tokens' count is)
    dim = weight_shape[1]
    n = sympy.Integer(1)
    for s in cx.shape(indices):
        n *= sympy.sympify(s)
    if n.is_zero:
        return cx.full(0, t.shape, t.dtype)
    work = _ACCUMULATE_IN.get(t.dtype)
    if work is None:
        raise NoLowering(f"embedding backward on {t.dtype}")
    rows = (n, dim)
    grad_rows = cx.reshape(cx.cast(grad, work), rows)
    token = cx.broadcast(cx.reshape(cx.cast(indices, I64), (n, sympy.Integer(1))), rows)
    if scale_grad_by_freq:  # each row divided by how often its token occurs
        flat = cx.reshape(cx.cast(indices, I64), (n,))
        count = scatter(cx, cx.full(0, (weight_shape[0],), work), flat, cx.full(1, (n,), work), "sum")
        grad_rows = cx.pointwise("div", [grad_rows, take(cx, count, token, rows)], rows, work)
    if padding_idx is not None and padding_idx >= 0:
        keep = cx.pointwise("ne", [token, int(padding_idx)], rows, "bool", operand_dtype=I64)
        grad_rows = cx.emit("where", [keep, grad_rows, cx.full(0, rows, work)], rows, work)
    pos = flat_position(cx, [token, iota(cx, rows, 1)], weight_shape, rows)
    return cx.cast(scatter(cx, cx.full(0, t.shape, work), pos, grad_rows, "sum"), t.dtype)
