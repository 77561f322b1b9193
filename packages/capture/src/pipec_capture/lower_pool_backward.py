"""The backward of fixed-window average and max pooling: a gather, not a scatter. Each
grad_input point sums grad_output over the few output windows that can cover it (at most
ceil(reach/stride) per spatial dim, reach being the window's span), read with `take` at clamped
positions and masked where a candidate window is out of range, does not reach the point (average
pooling) or did not pick it as its maximum (its saved index is not this point's). No atomics and
no scatter: every grad_input point is written once. The forward ops are in lower_pool.py;
lower_pool_adaptive_backward.py shares `gather_candidates`."""

from __future__ import annotations

import itertools
import math

from pipec_ir import Ref
from pipec_ir.symbolic import contiguous_strides

from .dtypes import acc_dtype, is_float
from .lower_indexing import I64, binop, clamp, flat_position, iota, take
from .lower_pool import MAX_TAPS, Window, avg_divisor, plane_position
from .table import NoLowering, register


# ------------------------------------------------------------ pooling backward (a gather over windows)


def _covering_windows(cx, win: Window, shape, k: int, reach: int, check_reach: bool):
    """The output windows along spatial dim k that can cover each input point of `shape`.

    Window o starts at o*stride - padding and spans `reach` input positions, so input h is
    covered iff o*stride - padding <= h < o*stride - padding + reach: o is at most
    last = (h + padding) // stride, and o = last - t for t < ceil(reach / stride) are the
    only candidates. Yields (o clamped into the output, mask or None) per candidate; a mask
    term is emitted only where some point needs it (the ranges are static).
    """
    s, p, size, out = win.stride[k], win.padding[k], win.size[k], win.out[k]
    h = iota(cx, shape, win.dims[k])
    shifted = binop(cx, "add", h, p, shape) if p else h
    last = binop(cx, "truediv_floor", shifted, s, shape) if s != 1 else shifted
    for t in range(-(-reach // s)):
        o = binop(cx, "sub", last, t, shape) if t else last
        tests = []
        if p // s - t < 0:  # the first points' candidate lies before the first window
            tests.append(cx.pointwise("ge", [o, 0], shape, "bool", operand_dtype=I64))
        if (size - 1 + p) // s - t > out - 1:  # the last points' candidate lies past the last window
            tests.append(cx.pointwise("lt", [o, out], shape, "bool", operand_dtype=I64))
        if check_reach and t * s + s - 1 >= reach:  # (h + p) - o*s = (h + p) % s + t*s may be past the span
            start = binop(cx, "mul", o, s, shape) if s != 1 else o
            tests.append(cx.pointwise("lt", [binop(cx, "sub", shifted, start, shape), reach], shape, "bool",
                                      operand_dtype=I64))
        mask = None
        for test in tests:
            mask = test if mask is None else cx.emit("logical_and", [mask, test], shape, "bool")
        yield (clamp(cx, o, 0, out - 1, shape) if tests else o), mask


def _gather_windows(cx, win: Window, grad: Ref, shape, reach, *, check_reach: bool, picked=None) -> Ref:
    """sum over candidate windows w of grad[w] where w covers the point (and picked(pos) if given)."""
    candidates = math.prod(-(-r // st) for r, st in zip(reach, win.stride))
    if candidates > MAX_TAPS:
        raise NoLowering(f"pooling backward over {candidates} candidate windows (more than {MAX_TAPS})")
    per_dim = [list(_covering_windows(cx, win, shape, k, reach[k], check_reach)) for k in range(win.n)]
    return gather_candidates(cx, grad, shape, win.lead, win.out, per_dim, picked)


def gather_candidates(cx, grad: Ref, shape, lead_shape, out, per_dim, picked=None) -> Ref:
    """sum over every combination of one candidate per spatial dim of grad[candidate], masked.

    per_dim[k] lists (output coordinate along dim k, mask or None) as Refs of `shape`; a
    combination counts where all its masks (and picked(position in grad), if given) hold.
    """
    acc = cx.dtype(grad)
    # grad's flat position: the lead dims' part (computed once) + one term per spatial dim and candidate
    plane, lead = math.prod(out), len(lead_shape)
    base = None
    if lead:
        base = flat_position(cx, [iota(cx, shape, d) for d in range(lead)], lead_shape, shape)
        base = binop(cx, "mul", base, plane, shape) if plane != 1 else base
    terms = []
    for candidates, stride in zip(per_dim, contiguous_strides(out)):
        stride = int(stride)
        terms.append([(o if stride == 1 else binop(cx, "mul", o, stride, shape), mask) for o, mask in candidates])
    zero = cx.full(0.0, shape, acc)
    total = None
    for combo in itertools.product(*terms):
        pos = base
        for term, _ in combo:
            pos = term if pos is None else binop(cx, "add", pos, term, shape)
        mask = None
        for test in [m for _, m in combo if m is not None] + ([picked(pos)] if picked else []):
            mask = test if mask is None else cx.emit("logical_and", [mask, test], shape, "bool")
        value = take(cx, grad, pos, shape)
        if mask is not None:  # where, not a product: a NaN gradient of a window that misses stays out
            value = cx.emit("where", [mask, value, zero], shape, acc)
        total = value if total is None else cx.emit("add", [total, value], shape, acc)
    return total


def _avg_pool_backward(n: int):
    def lower(cx, node, grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override=None):
        t = cx.result(node)
        if not is_float(t.dtype):
            raise NoLowering(f"{t.dtype} average pooling backward (integer division)")
        win = Window(cx, x, cx.type(grad_output), n, kernel_size, stride, padding, unrolled=False)
        if win.empty:
            return cx.full(0.0, t.shape, t.dtype)
        acc = acc_dtype(t.dtype)
        out_shape = cx.shape(grad_output)
        # each window's share of its gradient (grad / divisor), computed once per output point
        if divisor_override:
            divisor = float(divisor_override)
        else:
            divisor = avg_divisor(cx, win, out_shape, bool(count_include_pad))
            divisor = cx.cast(divisor, acc) if isinstance(divisor, Ref) else float(divisor)
        share = cx.pointwise("div", [cx.cast(grad_output, acc), divisor], out_shape, acc)
        total = _gather_windows(cx, win, share, t.shape, win.kernel, check_reach=True)
        return cx.cast(total, t.dtype)
    lower.__name__ = f"lower_avg_pool{n}d_backward"
    return lower


def _max_pool_backward(n: int):
    def lower(cx, node, grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
        t = cx.result(node)
        if not is_float(t.dtype):
            raise NoLowering(f"{t.dtype} max pooling backward")
        win = Window(cx, x, cx.type(grad_output), n, kernel_size, stride, padding, dilation, unrolled=False)
        if win.empty:
            return cx.full(0.0, t.shape, t.dtype)
        shape, acc = t.shape, acc_dtype(t.dtype)
        here = plane_position(cx, win, [iota(cx, shape, len(shape) - n + k) for k in range(n)], shape)
        index = cx.cast(indices, I64)

        def picked(pos):  # the window chose this very input point as its maximum
            return cx.pointwise("eq", [take(cx, index, pos, shape), here], shape, "bool", operand_dtype=I64)

        reach = [(k - 1) * d + 1 for k, d in zip(win.kernel, win.dilation)]
        # a saved index names a point of its own window: no span test needed
        total = _gather_windows(cx, win, cx.cast(grad_output, acc), shape, reach, check_reach=False, picked=picked)
        return cx.cast(total, t.dtype)
    lower.__name__ = f"lower_max_pool{n}d_with_indices_backward"
    return lower


register("aten.avg_pool2d_backward.default")(_avg_pool_backward(2))
register("aten.avg_pool3d_backward.default")(_avg_pool_backward(3))
register("aten.max_pool2d_with_indices_backward.default")(_max_pool_backward(2))
register("aten.max_pool3d_with_indices_backward.default")(_max_pool_backward(3))
