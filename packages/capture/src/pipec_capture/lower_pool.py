"""Lowerings of average and max pooling as sums / running maxima of window taps.

A pooling window of k_1 x ... x k_n taps is unrolled: tap (j_1, ..., j_n) of every output
point reads `slice(padded, start=j*dilation, step=stride)` along each spatial dim, a pure
view of the (padded) input. Padding (and, with ceil_mode, the overhang of the last windows
past the input's end) comes from the `take`-based constant pad of lower_indexing: zeros for
average pooling, -inf for max pooling, so padded taps never win. An undilated pool whose
windows reach into the padding reads no padded copy: it gathers each tap from the input at
clamped coordinates (`Window.clamped_taps`); an average counts the taps outside the input as
zeros, a max pool masks them in its indices scan. A channels-last max pool (pool_layouts.py's op)
pools dims 1..n of an [N, *spatial, C] input. The divisor of average
pooling and the argmax positions of max pooling are int64 arithmetic on `iota`s of the
output's coordinates (ceil_mode needs no code of its own: the output sizes, from the
node's meta, already count the overhanging windows). Adaptive average pooling with windows
of unequal length reads each tap with `take` at a clamped position and masks the taps past
a window's end; adaptive max pooling scans the same taps (masked taps never win) and returns
each window's first maximum and its flat position within the (N, C) plane, as eager does.
Windows of more than MAX_TAPS taps stay externs (the graph grows with every tap).

The backward of pooling is a gather, not a scatter (lower_pool_backward.py, and
lower_pool_adaptive_backward.py for adaptive pooling).
"""

from __future__ import annotations

import itertools
import math

import sympy

from pipec_ir import Ref, TensorType
from pipec_ir.symbolic import contiguous_strides

from .dtypes import acc_dtype, is_float
from .lower_indexing import I64, binop, clamp, flat_position, in_range, iota, padded_read, scalar_size, take
from .lower_reduction import reduce
from .table import NoLowering, register

MAX_TAPS = 64


def reaches_padding(padding, out, stride, kernel, dilation, size) -> bool:
    """Does some tap of some window lie outside the input (in the padding, or past the end)?
    Per spatial dim: the padding, the output size, the stride, kernel size, dilation and input size."""
    return any(p > 0 or (o - 1) * st + (k - 1) * d - p >= n
               for p, o, st, k, d, n in zip(padding, out, stride, kernel, dilation, size))


def per_dim(value, n: int, what: str) -> tuple[int, ...]:
    """An int or an int list of length 1 or n (ATen's int[n] argument) as n ints."""
    vals = [value] if isinstance(value, (int, sympy.Integer)) else list(value)
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n:
        raise NoLowering(f"{what} of length {len(vals)} for {n} spatial dims")
    return tuple(int(v) for v in vals)


class Window:
    """The geometry of one pooling call over the last n dims of x (channels_last: dims 1..n of
    an [N, *spatial, C] x): static spatial sizes; the batch and channel sizes may be symbolic,
    as a batch is under dynamic shapes."""

    def __init__(self, cx, x, out, n, kernel, stride, padding, dilation=1, *, unrolled=True, channels_last=False):
        self.n = n
        shape = tuple(sympy.sympify(s) for s in cx.shape(x))
        if len(shape) not in (n + 1, n + 2):
            raise NoLowering(f"{len(shape)}-D input for {n}-D pooling")
        # the spatial dims of x and of the result: the last n, or, channels-last, the n after the
        # batch ([N, *spatial, C]: pool_layouts.py)
        self.dims = tuple(range(1, 1 + n)) if channels_last else tuple(range(len(shape) - n, len(shape)))
        self.lead = tuple(s for d, s in enumerate(shape) if d not in self.dims)
        self.size = tuple(cx.static(shape[d]) for d in self.dims)
        self.out = tuple(cx.static(out.shape[d]) for d in self.dims)
        self.kernel = per_dim(kernel, n, "kernel_size")
        self.stride = per_dim(stride, n, "stride") if stride else self.kernel
        self.padding = per_dim(padding, n, "padding")
        self.dilation = per_dim(dilation, n, "dilation")
        taps = math.prod(self.kernel)
        if unrolled and taps > MAX_TAPS:
            raise NoLowering(f"pooling window of {taps} taps (more than {MAX_TAPS}: the graph would grow too big)")
        # nothing to read: the result is a fill
        self.empty = any(s.is_zero for s in self.lead) or 0 in self.size or 0 in self.out

    def offsets(self):
        """Every tap of the window as per-dim offsets, in row-major order (torch's scan order)."""
        return itertools.product(*[range(k) for k in self.kernel])

    def padded(self, cx, x, fill):
        """x padded on the left by `padding` and on the right far enough for every window."""
        highs = [max(0, (o - 1) * s + (k - 1) * d + 1 - (size + p))
                 for o, s, k, d, size, p in zip(self.out, self.stride, self.kernel, self.dilation,
                                                 self.size, self.padding)]
        if not any(self.padding) and not any(highs):
            return x
        if self.dims[-1] != len(cx.shape(x)) - 1:
            raise NoLowering("a padded copy of a channels-last input (pool_layouts.py rewrites only what clamped taps read)")
        shape = self.lead + tuple(sympy.Integer(size + p + h) for size, p, h in zip(self.size, self.padding, highs))
        t = TensorType(shape, cx.dtype(x))
        lows = [0] * len(self.lead) + list(self.padding)
        return padded_read(cx, x, t, lows, fill)

    def tap(self, cx, src, offset):
        """The window tap `offset` of every output point: strided slices of the padded input."""
        y = src
        shape = list(cx.shape(src))
        for dim, j, s, d, o in zip(self.dims, offset, self.stride, self.dilation, self.out):
            shape[dim] = sympy.Integer(o)
            y = cx.emit("slice", [y], tuple(shape), cx.dtype(src), dim=dim, start=j * d, step=s)
        return y

    def coordinate(self, cx, shape, k: int) -> Ref:
        """The input coordinate of each output point's window start along spatial dim k (may be < 0)."""
        c = iota(cx, shape, self.dims[k])
        if self.stride[k] != 1:
            c = binop(cx, "mul", c, self.stride[k], shape)
        return binop(cx, "sub", c, self.padding[k], shape) if self.padding[k] else c

    def clamped_taps(self, cx, x, shape, starts):
        """Every tap of the window read at its coordinates clamped to the input, in scan order,
        as (offset, value, per-dim unclamped coordinates or None where no tap leaves the input).

        Gathered from x itself, not from a padded copy: the copy was a kernel of its own and a
        round trip through memory (ResNet-50's stem: 51 MiB written and read again). Clamping
        is what a max pool with dilation 1 needs: every window holds at least one input point,
        and its clamped taps read points of the same window again (torch keeps the padding below
        half the window, and a ceil_mode window starts inside the input), so the maximum is the
        same. `starts`: each spatial dim's `coordinate`. Coordinates, offsets and strides are
        shared between the taps that use them: each tap adds one term per spatial dim to its
        row's position."""
        rank, src = len(shape), tuple(cx.shape(x))
        strides = contiguous_strides(src)
        lead = None  # the position of each output point's (batch, channel) in x
        for d in range(rank):
            if d not in self.dims:
                term = iota(cx, shape, d)
                if strides[d] != 1:
                    term = binop(cx, "mul", term, scalar_size(strides[d]), shape)
                lead = term if lead is None else binop(cx, "add", lead, term, shape)
        terms, coords = [], []  # per spatial dim and window offset: position term, coordinate
        for k, (d, start) in enumerate(zip(self.dims, starts)):
            terms.append([]), coords.append([])
            for j in range(self.kernel[k]):
                shift = j * self.dilation[k]
                c = binop(cx, "add", start, shift, shape) if shift else start
                first = shift - self.padding[k]
                last = first + (self.out[k] - 1) * self.stride[k]
                # clamped even where no window leaves the input: a coordinate in range by its
                # make is one the kernel reads off the position (codegen indexing_ops.py),
                # without an int64 division and modulo per dim to unflatten it
                inside = clamp(cx, c, 0, self.size[k] - 1, shape)
                term = inside if strides[d] == 1 else binop(cx, "mul", inside, scalar_size(strides[d]), shape)
                terms[k].append(term)
                coords[k].append(c if first < 0 or last > self.size[k] - 1 else None)
        rows = {}  # the position of every offset prefix: taps of one row share it
        for offset in self.offsets():
            pos = lead
            for k, j in enumerate(offset):
                key = offset[:k + 1]
                if key not in rows:
                    rows[key] = terms[k][j] if pos is None else binop(cx, "add", pos, terms[k][j], shape)
                pos = rows[key]
            yield offset, take(cx, x, pos, shape), [coords[k][j] for k, j in enumerate(offset)]


# ------------------------------------------------------------ average pooling


def avg_divisor(cx, win: Window, shape, count_include_pad: bool):
    """The per-output-point divisor (a number when it is the same everywhere, else int64 Ref).

    As torch: the window clipped to the padded input counts when count_include_pad, else
    only its part inside the input; it factors into one count per spatial dim.
    """
    divisor, factors = 1, []
    for k, (o, s, kk, p, size) in enumerate(zip(win.out, win.stride, win.kernel, win.padding, win.size)):
        counts = set()
        for i in range(o):
            start = i * s - p
            end = min(start + kk, size + p)
            counts.add(end - start if count_include_pad else min(end, size) - max(start, 0))
        if len(counts) == 1:
            divisor *= counts.pop()
            continue
        start = win.coordinate(cx, shape, k)
        end = binop(cx, "minimum", binop(cx, "add", start, kk, shape), size + p, shape)
        if not count_include_pad:
            end = binop(cx, "minimum", end, size, shape)
            start = binop(cx, "maximum", start, 0, shape)
        factors.append(binop(cx, "sub", end, start, shape))
    if not factors:
        return divisor
    count = factors[0]
    for f in factors[1:]:
        count = binop(cx, "mul", count, f, shape)
    return binop(cx, "mul", count, divisor, shape) if divisor != 1 else count


def _tiled_average(cx, x, t, n, kernel_size, stride, padding, divisor_override) -> Ref | None:
    """A window of more than MAX_TAPS taps that tiles the input, as a global pool over a large
    image is: one reduction over each window's dims of x viewed as [..., o1, k1, o2, k2, ...].
    Along each spatial dim the windows either sit back to back to the edge (stride = kernel,
    no padding), or there is one window at least as long as the input, clipped to it (ceil_mode:
    EfficientNet's pooler is a 1280-wide window over a 7 x 7 map), which reduces the whole dim
    and counts its length as torch does. None otherwise (the unrolled taps, or an extern
    beyond MAX_TAPS)."""
    kernel = per_dim(kernel_size, n, "kernel_size")
    if math.prod(kernel) <= MAX_TAPS or any(per_dim(padding, n, "padding")):
        return None
    strides = per_dim(stride, n, "stride") if stride else kernel
    shape = tuple(sympy.sympify(s) for s in cx.shape(x))
    if len(shape) not in (n + 1, n + 2):
        return None
    size = tuple(cx.static(s) for s in shape[-n:])
    out = tuple(cx.static(s) for s in t.shape[-n:])
    window = []  # each dim's window as it lies on the input
    for o, k, st, s in zip(out, kernel, strides, size):
        if o == 1 and k >= s > 0:
            window.append(s)
        elif o * k == s and st == k and o > 0:
            window.append(k)
        else:
            return None
    lead = shape[:-n]
    acc = acc_dtype(t.dtype)
    split = lead + tuple(sympy.Integer(v) for o, k in zip(out, window) for v in (o, k))
    window_dims = [len(lead) + 2 * k + 1 for k in range(n)]
    total = reduce(cx, "sum", cx.reshape(cx.cast(x, acc), split), window_dims, False, acc)
    divisor = float(int(divisor_override) if divisor_override else math.prod(window))
    return cx.cast(cx.pointwise("div", [total, divisor], cx.shape(total), acc), t.dtype)


def _clamped_terms(cx, win: Window, x, shape, acc: str):
    """An average's taps gathered from x at clamped coordinates (Window.clamped_taps), those
    outside the input counted as the padding's zeros: no padded copy (PoolFormer's 3 x 3 pools)."""
    starts = [win.coordinate(cx, shape, k) for k in range(len(win.dims))]
    zero = cx.full(0.0, shape, acc)
    for _, value, coords in win.clamped_taps(cx, x, shape, starts):
        term = cx.cast(value, acc)
        inside = _inside(cx, win, coords, shape)
        yield term if inside is None else cx.emit("where", [inside, term, zero], shape, acc)


def _avg_pool(n: int):
    def lower(cx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
        t = cx.result(node)
        if not is_float(t.dtype):
            raise NoLowering(f"{t.dtype} average pooling (integer division)")
        tiled = _tiled_average(cx, x, t, n, kernel_size, stride, padding, divisor_override)
        if tiled is not None:
            return tiled
        win = Window(cx, x, t, n, kernel_size, stride, padding)
        if win.empty:
            return cx.full(0.0, t.shape, t.dtype)
        acc = acc_dtype(t.dtype)
        if reaches_padding(win.padding, win.out, win.stride, win.kernel, win.dilation, win.size):
            terms = _clamped_terms(cx, win, x, t.shape, acc)
        else:
            src = win.padded(cx, cx.cast(x, acc), 0.0)
            terms = (win.tap(cx, src, offset) for offset in win.offsets())
        total = None
        for term in terms:
            total = term if total is None else cx.emit("add", [total, term], t.shape, acc)
        if divisor_override:
            divisor = int(divisor_override)
        else:
            divisor = avg_divisor(cx, win, t.shape, bool(count_include_pad))
        if isinstance(divisor, Ref):
            divisor = cx.cast(divisor, acc)
        else:
            divisor = float(divisor)
        return cx.cast(cx.pointwise("div", [total, divisor], t.shape, acc), t.dtype)
    lower.__name__ = f"lower_avg_pool{n}d"
    return lower


register("aten.avg_pool2d.default")(_avg_pool(2))
register("aten.avg_pool3d.default")(_avg_pool(3))


# ------------------------------------------------------------ max pooling with indices


def _first_valid(cx, win: Window, shape, k: int) -> Ref:
    """The first window coordinate inside the input along dim k: torch's initial argmax.

    A window starting in the left padding skips whole dilation steps until it is inside.
    """
    start = win.coordinate(cx, shape, k)
    if not win.padding[k]:
        return start
    d = win.dilation[k]
    outside = binop(cx, "maximum", binop(cx, "sub", 0, start, shape), 0, shape)
    steps = binop(cx, "truediv_floor", binop(cx, "add", outside, d - 1, shape), d, shape)
    return binop(cx, "add", start, binop(cx, "mul", steps, d, shape), shape)


def plane_position(cx, win: Window, coords, shape) -> Ref:
    """sum(coord_k * stride_k) over the spatial dims: the flat index within one input plane."""
    pos = None
    for c, st in zip(coords, contiguous_strides(win.size)):
        term = c if st == 1 else binop(cx, "mul", c, int(st), shape)
        pos = term if pos is None else binop(cx, "add", pos, term, shape)
    return pos


def _max_pool(n: int, channels_last: bool = False):
    """Max pooling with indices over the last n dims (channels_last: over dims 1..n of an
    [N, *spatial, C] input, pool_layouts.py's op)."""
    def lower(cx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        t = cx.result(node, 0)
        if not is_float(t.dtype):
            raise NoLowering(f"{t.dtype} max pooling (no -inf to pad with)")
        win = Window(cx, x, t, n, kernel_size, stride, padding, dilation, channels_last=channels_last)
        shape, dtype = t.shape, t.dtype
        if win.empty:
            return cx.full(float("-inf"), shape, dtype), cx.full(0, shape, I64)
        starts = [win.coordinate(cx, shape, k) for k in range(n)]
        base = plane_position(cx, win, starts, shape)  # plane index of tap (0, ..., 0)
        tap_step = contiguous_strides(win.size)
        where = plane_position(cx, win, [_first_valid(cx, win, shape, k) for k in range(n)], shape)

        def position(offset):
            shift = sum(j * d * int(st) for j, d, st in zip(offset, win.dilation, tap_step))
            return binop(cx, "add", base, shift, shape) if shift else base

        best = cx.full(float("-inf"), shape, dtype)
        if all(d == 1 for d in win.dilation) and reaches_padding(win.padding, win.out, win.stride, win.kernel, win.dilation, win.size):
            # clamped taps (Window.clamped_taps): the maximum is NaN-propagating `maximum` over
            # them; the indices scan masks the clamped ones, so a tie picks the first point
            # inside the window, as torch does (an inference graph drops that scan)
            values = None
            for offset, value, coords in win.clamped_taps(cx, x, shape, starts):
                values = value if values is None else cx.emit("maximum", [values, value], shape, dtype)
                inside = _inside(cx, win, coords, shape)
                best, where = _max_step(cx, value, position(offset), best, where, shape, dtype, inside)
            return values, where
        src = win.padded(cx, x, float("-inf"))
        for offset in win.offsets():
            best, where = _max_step(cx, win.tap(cx, src, offset), position(offset), best, where, shape, dtype)
        return best, where
    lower.__name__ = f"lower_max_pool{n}d_with_indices{'_channels_last' if channels_last else ''}"
    return lower


def _inside(cx, win: Window, coords, shape) -> Ref | None:
    """Whether each output point's tap at unclamped `coords` (None: inside for every point) lies
    in the input; None when it does everywhere."""
    inside = None
    for c, size in zip(coords, win.size):
        if c is not None:
            ok = in_range(cx, c, size, shape)
            inside = ok if inside is None else cx.emit("logical_and", [inside, ok], shape, "bool")
    return inside


def _max_step(cx, value, position, best, where, shape, dtype, inside=None):
    """One tap of a max-pool scan: (best, where) after `value` at `position` is seen. As torch's
    scan: a tap wins if it is greater or NaN (NaN propagates; ties keep the first); `inside`
    (optional) masks taps outside the window."""
    wins = cx.emit("logical_or", [cx.pointwise("gt", [value, best], shape, "bool", operand_dtype=dtype),
                                  cx.emit("isnan", [value], shape, "bool")], shape, "bool")
    if inside is not None:
        wins = cx.emit("logical_and", [inside, wins], shape, "bool")
    return cx.emit("where", [wins, value, best], shape, dtype), cx.emit("where", [wins, position, where], shape, I64)


register("aten.max_pool2d_with_indices.default")(_max_pool(2))
register("aten.max_pool3d_with_indices.default")(_max_pool(3))
register("pipec.max_pool2d_nhwc.default")(_max_pool(2, channels_last=True))  # pool_layouts.py


# ------------------------------------------------------------ adaptive average pooling


def adaptive_windows(cx, shape, dim: int, size: int, out: int):
    """Output point i along `dim` pools input [floor(i*size/out), ceil((i+1)*size/out)).

    Returns (start, length) as int64 Refs of `shape` and the longest window (static)."""
    i = iota(cx, shape, dim)
    scaled = binop(cx, "mul", i, size, shape)
    start = binop(cx, "truediv_floor", scaled, out, shape)
    end = binop(cx, "truediv_floor", binop(cx, "add", scaled, size + out - 1, shape), out, shape)
    longest = max(-(-(k + 1) * size // out) - k * size // out for k in range(out))
    return start, binop(cx, "sub", end, start, shape), longest


def _adaptive_taps(cx, shape, windows, size):
    """Every tap of the longest adaptive window: (per-dim input coordinates, mask or None).

    Windows shorter than the longest read their extra taps at a clamped position and are
    masked there; tap 0 of every dim is inside every window (no mask). Taps come in
    row-major order, torch's scan order (which picks max pooling's first maximum)."""
    for offset in itertools.product(*[range(w[2]) for w in windows]):
        coords, inside = [], None
        for j, (start, length, _), s in zip(offset, windows, size):
            coords.append(binop(cx, "minimum", binop(cx, "add", start, j, shape), s - 1, shape) if j else start)
            if j:
                ok = cx.pointwise("lt", [j, length], shape, "bool", operand_dtype=I64)
                inside = ok if inside is None else cx.emit("logical_and", [inside, ok], shape, "bool")
        yield coords, inside


def _adaptive_avg_pool(n: int):
    def lower(cx, node, x, output_size):
        t = cx.result(node)
        if not is_float(t.dtype):
            raise NoLowering(f"{t.dtype} adaptive average pooling (integer division)")
        src_shape = tuple(cx.static(s) for s in cx.shape(x))
        out = per_dim(output_size, n, "output_size")
        if 0 in src_shape or 0 in out:
            return cx.full(0.0, t.shape, t.dtype)
        size = src_shape[-n:]
        if all(s % o == 0 for s, o in zip(size, out)):  # equal windows, back to back: a plain average pool
            kernel = tuple(s // o for s, o in zip(size, out))
            return _avg_pool(n)(cx, node, x, kernel, kernel)
        shape, rank, acc = t.shape, len(src_shape), acc_dtype(t.dtype)
        windows = [adaptive_windows(cx, shape, rank - n + k, size[k], out[k]) for k in range(n)]
        taps = math.prod(w[2] for w in windows)
        if taps > MAX_TAPS:
            raise NoLowering(f"adaptive pooling window of {taps} taps (more than {MAX_TAPS})")
        xs = cx.cast(x, acc)
        lead = [iota(cx, shape, d) for d in range(rank - n)]
        total = None
        for coords, inside in _adaptive_taps(cx, shape, windows, size):
            value = take(cx, xs, flat_position(cx, lead + coords, src_shape, shape), shape)
            if inside is not None:
                value = cx.emit("where", [inside, value, cx.full(0.0, shape, acc)], shape, acc)
            total = value if total is None else cx.emit("add", [total, value], shape, acc)
        count = windows[0][1]
        for w in windows[1:]:
            count = binop(cx, "mul", count, w[1], shape)
        return cx.cast(cx.emit("div", [total, cx.cast(count, acc)], shape, acc), t.dtype)
    lower.__name__ = f"lower_adaptive_avg_pool{n}d"
    return lower


register("aten._adaptive_avg_pool2d.default")(_adaptive_avg_pool(2))
register("aten._adaptive_avg_pool3d.default")(_adaptive_avg_pool(3))


# ------------------------------------------------------------ adaptive max pooling with indices


def _adaptive_max_pool(n: int):
    def lower(cx, node, x, output_size):
        t = cx.result(node, 0)
        if not is_float(t.dtype):
            raise NoLowering(f"{t.dtype} adaptive max pooling")
        src_shape = tuple(cx.static(s) for s in cx.shape(x))
        if len(src_shape) not in (n + 1, n + 2):
            raise NoLowering(f"{len(src_shape)}-D input for {n}-D adaptive pooling")
        out = per_dim(output_size, n, "output_size")
        shape, dtype = t.shape, t.dtype
        if 0 in src_shape or 0 in out:
            return cx.full(float("-inf"), shape, dtype), cx.full(0, shape, I64)
        size = src_shape[-n:]
        if all(s % o == 0 for s, o in zip(size, out)):  # equal windows, back to back: a plain max pool
            kernel = tuple(s // o for s, o in zip(size, out))
            return _max_pool(n)(cx, node, x, kernel, kernel)
        rank = len(src_shape)
        windows = [adaptive_windows(cx, shape, rank - n + k, size[k], out[k]) for k in range(n)]
        taps = math.prod(w[2] for w in windows)
        if taps > MAX_TAPS:
            raise NoLowering(f"adaptive pooling window of {taps} taps (more than {MAX_TAPS})")
        # a tap's read position: its (N, C) plane's offset (computed once) + its index in the plane
        plane, lead = math.prod(size), rank - n
        base = None
        if lead:
            base = flat_position(cx, [iota(cx, shape, d) for d in range(lead)], src_shape[:lead], shape)
            base = binop(cx, "mul", base, plane, shape)
        best = where = None
        for coords, inside in _adaptive_taps(cx, shape, windows, size):
            here = flat_position(cx, coords, size, shape)
            value = take(cx, x, here if base is None else binop(cx, "add", base, here, shape), shape)
            if best is None:  # tap 0 starts the scan (eager starts from -inf at the window's start: the same)
                best, where = value, here
                continue
            best, where = _max_step(cx, value, here, best, where, shape, dtype, inside)
        return best, where
    lower.__name__ = f"lower_adaptive_max_pool{n}d"
    return lower


register("aten.adaptive_max_pool2d.default")(_adaptive_max_pool(2))
register("aten.adaptive_max_pool3d.default")(_adaptive_max_pool(3))
