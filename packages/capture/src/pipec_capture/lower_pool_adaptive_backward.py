"""Backward of adaptive pooling as generated code: each input point gathers the gradient of
the output cells whose (uneven) windows cover it (`_adaptive_avg_pool*_backward` by its
cells' sizes, `adaptive_max_pool*_backward` where a cell's argmax is that point). The
forward ops are in lower_pool.py; the fixed-window backward is in lower_pool_backward.py, whose
gather this shares."""

from __future__ import annotations

import math

from pipec_ir import Ref

from .dtypes import acc_dtype, is_float
from .lower_indexing import I64, binop, flat_position, iota, take
from .lower_pool import MAX_TAPS, adaptive_windows
from .lower_pool_backward import gather_candidates
from .table import NoLowering, register


# ------------------------------------------------------------ adaptive average pooling backward


def _adaptive_spans(size: int, out: int) -> list[int]:
    """The length of each adaptive window (static): ceil((i+1)*size/out) - floor(i*size/out)."""
    return [-(-(i + 1) * size // out) - i * size // out for i in range(out)]


def _adaptive_divisor(cx, shape, sizes, outs):
    """Each output point's window size over the last len(sizes) dims of `shape`: a number
    where it is the same everywhere, else an int64 Ref (one factor per uneven dim)."""
    n, divisor, factor = len(sizes), 1, None
    for k, (size, out) in enumerate(zip(sizes, outs)):
        spans = set(_adaptive_spans(size, out))
        if len(spans) == 1:
            divisor *= spans.pop()
            continue
        _, length, _ = adaptive_windows(cx, shape, len(shape) - n + k, size, out)
        factor = length if factor is None else binop(cx, "mul", factor, length, shape)
    if factor is None:
        return divisor
    return binop(cx, "mul", factor, divisor, shape) if divisor != 1 else factor


def _adaptive_covering_cells(cx, shape, dim: int, size: int, out: int):
    """The output cells along `dim` whose adaptive windows cover each input point of `shape`.

    Cell i covers input [floor(i*size/out), ceil((i+1)*size/out)), so input p is covered by
    exactly the cells [floor(p*out/size), ceil((p+1)*out/size)): the same formula with size
    and out swapped (floor(i*size/out) <= p iff i*size < (p+1)*out, and
    ceil((i+1)*size/out) > p iff (i+1)*size > p*out). That range is never empty and holds at
    most max_p of its length cells (<= ceil(out/size) + 1, exactly 1 when out divides size).
    Yields (cell, mask or None) per candidate; candidate 0 always covers, a later one is
    clamped into the output and masked only if some point has fewer covering cells.
    """
    first, count, most = adaptive_windows(cx, shape, dim, out, size)
    fewest = min(_adaptive_spans(out, size))
    for j in range(most):
        if j < fewest:  # every point has at least j + 1 covering cells: in range, no mask
            yield (binop(cx, "add", first, j, shape) if j else first), None
            continue
        cell = binop(cx, "minimum", binop(cx, "add", first, j, shape), out - 1, shape)
        yield cell, cx.pointwise("lt", [j, count], shape, "bool", operand_dtype=I64)


def _adaptive_backward_sizes(cx, node, grad_output, x, n: int, what: str):
    """(result type, input shape, its last n sizes, the output's last n sizes), all static, for
    a backward over adaptive windows; a non-float result or too many candidate cells per input
    point: extern."""
    t = cx.result(node)
    if not is_float(t.dtype):
        raise NoLowering(f"{t.dtype} adaptive {what} pooling backward")
    src_shape = tuple(cx.static(s) for s in cx.shape(x))
    out_shape = tuple(cx.static(s) for s in cx.shape(grad_output))
    if len(src_shape) not in (n + 1, n + 2) or len(out_shape) != len(src_shape):
        raise NoLowering(f"{len(src_shape)}-D input for {n}-D adaptive pooling")
    size, out = src_shape[-n:], out_shape[-n:]
    if 0 not in src_shape and 0 not in out:
        candidates = math.prod(max(_adaptive_spans(o, s)) for s, o in zip(size, out))
        if candidates > MAX_TAPS:
            raise NoLowering(f"adaptive pooling backward over {candidates} candidate cells (more than {MAX_TAPS})")
    return t, src_shape, size, out


def _adaptive_avg_pool_backward(n: int):
    def lower(cx, node, grad_output, x):
        t, src_shape, size, out = _adaptive_backward_sizes(cx, node, grad_output, x, n, "average")
        if 0 in src_shape or 0 in out:
            return cx.full(0.0, t.shape, t.dtype)
        acc, shape, rank = acc_dtype(t.dtype), t.shape, len(src_shape)
        # each cell's share of its gradient (grad / window size), computed once per output point
        divisor = _adaptive_divisor(cx, cx.shape(grad_output), size, out)
        divisor = cx.cast(divisor, acc) if isinstance(divisor, Ref) else float(divisor)
        share = cx.pointwise("div", [cx.cast(grad_output, acc), divisor], cx.shape(grad_output), acc)
        per_dim = [list(_adaptive_covering_cells(cx, shape, rank - n + k, size[k], out[k])) for k in range(n)]
        total = gather_candidates(cx, share, shape, src_shape[:-n], out, per_dim)
        return cx.cast(total, t.dtype)
    lower.__name__ = f"lower_adaptive_avg_pool{n}d_backward"
    return lower


register("aten._adaptive_avg_pool2d_backward.default")(_adaptive_avg_pool_backward(2))
register("aten._adaptive_avg_pool3d_backward.default")(_adaptive_avg_pool_backward(3))


def _adaptive_max_pool_backward(n: int):
    def lower(cx, node, grad_output, x, indices):
        t, src_shape, size, out = _adaptive_backward_sizes(cx, node, grad_output, x, n, "max")
        if 0 in src_shape or 0 in out:
            return cx.full(0.0, t.shape, t.dtype)
        acc, shape, rank = acc_dtype(t.dtype), t.shape, len(src_shape)
        here = flat_position(cx, [iota(cx, shape, rank - n + k) for k in range(n)], size, shape)
        index = cx.cast(indices, I64)

        def picked(pos):  # the cell chose this very input point as its maximum
            return cx.pointwise("eq", [take(cx, index, pos, shape), here], shape, "bool", operand_dtype=I64)

        # a cell picks a point of its own window, so the cells covering a point are the only candidates
        per_dim = [list(_adaptive_covering_cells(cx, shape, rank - n + k, size[k], out[k])) for k in range(n)]
        total = gather_candidates(cx, cx.cast(grad_output, acc), shape, src_shape[:-n], out, per_dim, picked)
        return cx.cast(total, t.dtype)
    lower.__name__ = f"lower_adaptive_max_pool{n}d_backward"
    return lower


register("aten.adaptive_max_pool2d_backward.default")(_adaptive_max_pool_backward(2))
register("aten.adaptive_max_pool3d_backward.default")(_adaptive_max_pool_backward(3))
