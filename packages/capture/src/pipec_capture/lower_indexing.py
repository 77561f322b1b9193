"""Lowerings of indexing and layout ops through `take` (docs/IR.md, "Indexing").

Every op here reads its source at a computed position: `take(src, pos)` with `pos` the
row-major flat position in `src`, built from `iota`s (the output's coordinates) and index
tensors with int64 pointwise ops. gather / index_select / embedding / index.Tensor replace
one coordinate by an index tensor; cat, constant_pad_nd, flip, slice_scatter, diagonal and
unfold compute the coordinate from the output's own. Positions are always in range: where an
output point has no source element (padding, another cat input), the position is clamped
and the value replaced by `where`.
"""

from __future__ import annotations

import sympy

from pipec_ir import Ref
from pipec_ir.symbolic import contiguous_strides

from .builder import GraphBuilder, wrap_dim
from .cat_parts import MAX_PARTS, PartGather, producers
from .table import NoLowering, register

I64 = "int64"


def static_shape(cx: GraphBuilder, shape) -> tuple[int, ...]:
    """`shape` as ints, for lowerings that need every size static (a symbolic one: NoLowering, extern)."""
    return tuple(cx.static(s) for s in shape)


def iota(cx: GraphBuilder, shape, dim: int) -> Ref:
    """The coordinate along `dim` of every point of `shape` (int64)."""
    return cx.emit("iota", [], shape, I64, dim=dim, start=0, step=1)


def binop(cx: GraphBuilder, op: str, a, b, shape, dtype: str = I64) -> Ref:
    return cx.pointwise(op, [a, b], shape, dtype)


def clamp(cx: GraphBuilder, x: Ref, lo: int, hi: int, shape) -> Ref:
    return binop(cx, "minimum", binop(cx, "maximum", x, lo, shape), hi, shape)


def flat_position(cx: GraphBuilder, coords, src_shape, shape) -> Ref:
    """sum(coord_k * stride_k) over src's dims: coords are Refs of `shape` or ints."""
    pos = None
    for c, stride in zip(coords, contiguous_strides(src_shape)):
        stride = scalar_size(stride)
        term = c if stride == 1 else binop(cx, "mul", c, stride, shape)
        pos = term if pos is None else binop(cx, "add", pos, term, shape)
    return pos if pos is not None else cx.full(0, shape, I64)


def take(cx: GraphBuilder, src: Ref, pos, shape) -> Ref:
    if not isinstance(pos, Ref):
        pos = cx.full(pos, shape, I64)
    return cx.emit("take", [src, cx.cast(pos, I64)], shape, cx.dtype(src))


def wrap_negative(cx: GraphBuilder, idx: Ref, size: int, shape) -> Ref:
    """Python-style negative indices (index.Tensor accepts them) -> [0, size)."""
    neg = cx.pointwise("lt", [idx, 0], shape, "bool", operand_dtype=I64)
    return cx.emit("where", [neg, binop(cx, "add", idx, size, shape), idx], shape, I64)


def index_operand(cx: GraphBuilder, idx: Ref, shape) -> Ref:
    if cx.dtype(idx) not in ("int64", "int32"):
        raise NoLowering(f"index tensor of dtype {cx.dtype(idx)} (a mask: data-dependent shape)")
    return cx.broadcast(cx.cast(idx, I64), shape)


def gather_along(cx: GraphBuilder, src: Ref, dim: int, idx: Ref, shape) -> Ref:
    """out[p] = src[p with p[dim] = idx[p]]; idx already has the output's shape. Sizes may be
    symbolic: positions are then arithmetic on size expressions."""
    src_shape = tuple(cx.shape(src))
    coords = [idx if d == dim else iota(cx, shape, d) for d in range(len(src_shape))]
    return take(cx, src, flat_position(cx, coords, src_shape, shape), shape)


@register("aten.gather.default")
def lower_gather(cx, node, x, dim, index, *, sparse_grad=False):
    t = cx.result(node)
    shape = tuple(t.shape)
    if not shape:
        return take(cx, x, cx.cast(index, I64), t.shape)
    dim = wrap_dim(dim, len(shape))
    return gather_along(cx, x, dim, index_operand(cx, index, t.shape), t.shape)


@register("aten.index_select.default")
def lower_index_select(cx, node, x, dim, index):
    t = cx.result(node)
    shape = tuple(t.shape)  # sizes may be symbolic (gather_along)
    if not shape:
        return take(cx, x, cx.reshape(cx.cast(index, I64), ()), t.shape)
    dim = wrap_dim(dim, len(shape))
    column = [1] * len(shape)
    column[dim] = shape[dim]
    idx = cx.reshape(cx.cast(index, I64), tuple(sympy.sympify(c) for c in column))
    return gather_along(cx, x, dim, cx.broadcast(idx, t.shape), t.shape)


@register("aten.embedding.default")
def lower_embedding(cx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    t = cx.result(node)  # sizes may be symbolic: positions are arithmetic on size expressions
    if len(cx.shape(weight)) != 2:
        raise NoLowering("embedding weight is not 2-D")
    idx = cx.reshape(cx.cast(indices, I64), tuple(cx.shape(indices)) + (sympy.Integer(1),))
    row = cx.broadcast(idx, t.shape)
    column = iota(cx, t.shape, len(t.shape) - 1)
    return take(cx, weight, flat_position(cx, [row, column], tuple(cx.shape(weight)), t.shape), t.shape)


@register("aten.index.Tensor")
def lower_index(cx, node, x, indices):
    """Advanced indexing: index tensors (broadcast together) replace the coordinates of their dims.
    Sizes may be symbolic: positions are then arithmetic on size expressions."""
    src_shape = tuple(sympy.sympify(s) for s in cx.shape(x))
    coords, shape = advanced_index_coords(cx, src_shape, indices)
    return take(cx, x, flat_position(cx, coords, src_shape, shape), shape)


def advanced_index_coords(cx, src_shape, indices) -> tuple[list, tuple]:
    """(the source coordinate of every point of x[indices], that result's shape): the index
    tensors (broadcast together, negative values wrapped) replace the coordinates of their
    dims; index.Tensor reads there and index_put writes there (lower_scatter.py)."""
    indices = list(indices) + [None] * (len(src_shape) - len(indices))
    given = [d for d, i in enumerate(indices) if i is not None]
    if not given:
        raise NoLowering("no index tensor")
    src_shape = tuple(sympy.sympify(s) for s in src_shape)
    bshape = _broadcast_shapes(cx, [tuple(cx.shape(indices[d])) for d in given])
    adjacent = given == list(range(given[0], given[-1] + 1))
    # where the broadcast index dims sit in the output, and where each remaining src dim goes
    first = given[0] if adjacent else 0
    rest = [d for d in range(len(src_shape)) if d not in given]
    out_dim_of = {}
    k = 0
    for d in rest:
        if adjacent and d > given[-1]:
            out_dim_of[d] = d - len(given) + len(bshape)
        elif adjacent:
            out_dim_of[d] = d
        else:
            out_dim_of[d] = len(bshape) + k
            k += 1
    out_shape = [0] * (len(rest) + len(bshape))
    for d in rest:
        out_shape[out_dim_of[d]] = src_shape[d]
    out_shape[first:first + len(bshape)] = bshape
    tshape = tuple(sympy.sympify(s) for s in out_shape)
    coords = []
    for d in range(len(src_shape)):
        if indices[d] is None:
            coords.append(iota(cx, tshape, out_dim_of[d]))
            continue
        idx = index_operand(cx, indices[d], bshape)
        lead = [sympy.Integer(1)] * first
        tail = [sympy.Integer(1)] * (len(out_shape) - first - len(bshape))
        idx = cx.broadcast(cx.reshape(idx, (*lead, *cx.shape(idx), *tail)), tshape)
        coords.append(wrap_negative(cx, idx, src_shape[d], tshape))
    return coords, tshape


def _broadcast_shapes(cx, shapes) -> tuple:
    """The broadcast of shapes of sizes or size expressions (NumPy's rule, right-aligned); a dim
    whose sizes are neither 1 nor provably equal: NoLowering."""
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        sizes = {sympy.sympify(s[len(s) - rank + k]) for s in shapes if len(s) - rank + k >= 0}
        sizes.discard(sympy.Integer(1))
        if not sizes:
            out.append(sympy.Integer(1))
            continue
        first, *rest = sorted(sizes, key=str)
        if any(r != first and not cx.symbols.provably_equal(r, first) for r in rest):
            raise NoLowering(f"index tensors of sizes {sorted(map(str, sizes))} do not broadcast")
        out.append(first)
    return tuple(out)


@register("aten.cat.default")
def lower_cat(cx, node, tensors, dim=0):
    """Each output point takes the input whose range along `dim` holds it (clamped reads + where)."""
    t = cx.result(node)
    shape = tuple(t.shape)  # sizes may be symbolic: each part's range is then a size expression
    parts = [x for x in tensors if tuple(cx.shape(x)) != (0,)]  # legacy empty inputs
    if not shape:
        raise NoLowering("0-dim cat")
    dim = wrap_dim(dim, len(shape))
    parts = [x for x in parts if not sympy.sympify(cx.shape(x)[dim]).is_zero]
    if not all(cx.symbols.surely_positive(cx.shape(x)[dim]) for x in parts):
        # a part empty at run time would be read out of bounds (its clamp reaches -1)
        return _cat_by_writes(cx, parts, dim, t)
    if len(parts) == 1:
        return cx.emit("identity", [cx.cast(parts[0], t.dtype)], t.shape, t.dtype)
    if not parts:
        return cx.full(0, t.shape, t.dtype)
    along = iota(cx, t.shape, dim)
    result, start, pieces = None, 0, []
    parts = [cx.cast(x, t.dtype) for x in parts]
    made = producers(cx)
    for x in parts:
        n = scalar_size(cx.shape(x)[dim])
        local = clamp(cx, binop(cx, "sub", along, start, t.shape), 0, n - 1, t.shape)
        def gather(v, local=local):
            return gather_along(cx, v, dim, local, t.shape)

        if len(parts) > MAX_PARTS:
            pieces.append((start + n, gather(x)))
        else:  # a part's math runs at the gathered points where that stores no more (cat_parts.py)
            pieces.append((start + n, PartGather(cx, made, dim, local, t.shape, gather).read(x)))
        start += n
    result = pieces[-1][1]
    for end, value in reversed(pieces[:-1]):
        inside = cx.pointwise("lt", [along, end], t.shape, "bool", operand_dtype=I64)
        result = cx.emit("where", [inside, value, result], t.shape, t.dtype)
    return result


def _cat_by_writes(cx, parts, dim: int, t) -> Ref:
    """A cat with a part that may be empty at run time (JetMoE's router: tokens per expert): each
    part written at its place in the result, one scatter per part over the part's own points, so an
    empty part launches nothing and reads nothing. The parts cover the result, so the zeros it starts
    from are all overwritten."""
    out = cx.full(0, t.shape, t.dtype)
    start = sympy.Integer(0)
    for x in parts:
        shape = tuple(cx.shape(x))
        coords = [iota(cx, shape, d) for d in range(len(shape))]
        if start != 0:
            coords[dim] = binop(cx, "add", coords[dim], scalar_size(start), shape)
        pos = flat_position(cx, coords, tuple(sympy.sympify(s) for s in t.shape), shape)
        out = cx.emit("scatter", [out, pos, cx.cast(x, t.dtype)], t.shape, t.dtype, reduce="none")
        start += sympy.sympify(shape[dim])
    return out


def scalar_size(size):
    """A size as a pointwise scalar operand: an int, or a size expression (a symbolic `full`)."""
    size = sympy.sympify(size)
    return int(size) if size.is_Integer else size


def in_range(cx, c: Ref, n, shape) -> Ref:
    """0 <= c < n, per point (c an int64 coordinate, n a size)."""
    return cx.emit("logical_and", [cx.pointwise("ge", [c, 0], shape, "bool", operand_dtype=I64),
                                   cx.pointwise("lt", [c, n], shape, "bool", operand_dtype=I64)], shape, "bool")


def padded_read(cx, x, t, lows, fill):
    """out[p] = x[p - lows] where that is inside x, else `fill` (lows per dim: ints or size
    expressions, of either sign). Sizes may be symbolic; every dim of x must then be surely
    non-empty (the clamped read of an empty dim would leave x)."""
    src_shape = tuple(sympy.sympify(s) for s in cx.shape(x))
    for size in src_shape:
        if not cx.symbols.surely_positive(size):
            raise NoLowering(f"a padded read of a dim whose size {size} may be 0")
    coords, inside = [], None
    for d, (lo, size) in enumerate(zip(lows, src_shape)):
        c = iota(cx, t.shape, d)
        beyond = sympy.sympify(t.shape[d]) - size
        if sympy.sympify(lo) == 0 and beyond.is_Integer and beyond <= 0:
            coords.append(c)  # no padding on this dim: every output point reads x
            continue
        n, lo = scalar_size(size), scalar_size(lo)
        j = binop(cx, "sub", c, lo, t.shape)
        ok = in_range(cx, j, n, t.shape)
        inside = ok if inside is None else cx.emit("logical_and", [inside, ok], t.shape, "bool")
        coords.append(clamp(cx, j, 0, n - 1, t.shape))
    value = take(cx, x, flat_position(cx, coords, src_shape, t.shape), t.shape)
    if inside is None:
        return value
    return cx.emit("where", [inside, value, cx.operand(fill, t.shape, t.dtype)], t.shape, t.dtype)


@register("aten.constant_pad_nd.default")
def lower_constant_pad_nd(cx, node, x, pad, value=0):
    """Padding by ints or by size expressions (a sequence padded up to another's length); a
    negative pad crops (the backward of a pad: a padded weight's gradient cut back to its rows)."""
    t = cx.result(node)
    rank = len(cx.shape(x))
    pads = [cx.symbols.size(p) for p in pad]  # ints or size expressions
    lows = [0] * rank
    for k in range(len(pads) // 2):
        lows[rank - 1 - k] = pads[2 * k]
    if any(sympy.sympify(s).is_zero for s in cx.shape(x)):
        return cx.full(value, t.shape, t.dtype)
    return padded_read(cx, x, t, lows, value)


@register("aten.flip.default")
def lower_flip(cx, node, x, dims):
    t = cx.result(node)
    shape = static_shape(cx, t.shape)
    flipped = {wrap_dim(d, len(shape)) for d in dims}
    coords = []
    for d, size in enumerate(shape):
        c = iota(cx, t.shape, d)
        coords.append(binop(cx, "sub", size - 1, c, t.shape) if d in flipped else c)
    return take(cx, x, flat_position(cx, coords, shape, t.shape), t.shape) if shape else \
        cx.emit("identity", [x], t.shape, t.dtype)


def _slice_start(cx, start, size) -> int | sympy.Expr:
    """A slice's start in [0, size]: Python's normalization of a static start; a symbolic one
    only when it is surely in range (else NoLowering: an extern)."""
    if start is None:
        return 0
    start = cx.symbols.size(start)
    size = sympy.sympify(size)
    if start.is_Integer:
        s = int(start)
        if s >= 0:
            return s if not size.is_Integer else min(s, int(size))
        if size.is_Integer:
            return max(s + int(size), 0)
        if cx.symbols.surely_positive(size + s + 1):  # start + size >= 0 for every size
            return size + s
        raise NoLowering(f"negative slice start {s} of a size {size} that may be shorter")
    if cx.symbols.surely_positive(start + 1) and cx.symbols.surely_positive(size - start + 1):
        return start
    raise NoLowering(f"slice start {start} may fall outside [0, {size}]")


@register("aten.slice_scatter.default")
def lower_slice_scatter(cx, node, x, src, dim=0, start=None, end=None, step=1):
    """out = x with src written over x[start::step] along `dim` (the backward of a slice). Sizes
    may be symbolic; the written part's length must then be surely positive (its clamped read
    would leave src where it may be empty)."""
    t = cx.result(node)
    shape = tuple(t.shape)
    dim = wrap_dim(dim, len(shape))
    start = _slice_start(cx, start, shape[dim])
    n = sympy.sympify(cx.shape(src)[dim])
    step = cx.static(step)
    if n.is_zero:
        return cx.emit("identity", [x], t.shape, t.dtype)
    if not cx.symbols.surely_positive(n):
        raise NoLowering(f"slice_scatter of a part whose size {n} may be 0")
    n = scalar_size(n)
    start = scalar_size(start)
    j = binop(cx, "sub", iota(cx, t.shape, dim), start, t.shape)
    ok = cx.emit("logical_and", [cx.pointwise("ge", [j, 0], t.shape, "bool", operand_dtype=I64),
                                 cx.pointwise("lt", [j, n * step], t.shape, "bool", operand_dtype=I64)],
                 t.shape, "bool")
    if step != 1:
        on_step = cx.pointwise("eq", [binop(cx, "remainder", j, step, t.shape), 0], t.shape, "bool",
                               operand_dtype=I64)
        ok = cx.emit("logical_and", [ok, on_step], t.shape, "bool")
        j = binop(cx, "truediv_floor", j, step, t.shape)
    local = clamp(cx, j, 0, n - 1, t.shape)
    value = gather_along(cx, cx.cast(src, t.dtype), dim, local, t.shape)
    return cx.emit("where", [ok, value, cx.cast(x, t.dtype)], t.shape, t.dtype)


@register("aten.select_scatter.default")
def lower_select_scatter(cx, node, x, src, dim, index):
    """out = x with src written over x.select(dim, index); sizes may be symbolic (a negative
    index then counts from a size expression)."""
    t = cx.result(node)
    shape = tuple(t.shape)
    dim = wrap_dim(dim, len(shape))
    index = cx.static(index)
    index = scalar_size(sympy.sympify(shape[dim]) + index) if index < 0 else index
    lifted = list(cx.shape(src))
    lifted.insert(dim, sympy.Integer(1))
    value = cx.broadcast(cx.reshape(cx.cast(src, t.dtype), tuple(lifted)), t.shape)
    here = cx.pointwise("eq", [iota(cx, t.shape, dim), index], t.shape, "bool", operand_dtype=I64)
    return cx.emit("where", [here, value, cx.cast(x, t.dtype)], t.shape, t.dtype)


@register("aten.diagonal.default")
def lower_diagonal(cx, node, x, offset=0, dim1=0, dim2=1):
    t = cx.result(node)
    src_shape = static_shape(cx, cx.shape(x))
    d1, d2 = wrap_dim(dim1, len(src_shape)), wrap_dim(dim2, len(src_shape))
    rest = [d for d in range(len(src_shape)) if d not in (d1, d2)]
    last = len(t.shape) - 1
    diag = iota(cx, t.shape, last)
    coords = []
    for d in range(len(src_shape)):
        if d == d1:
            coords.append(binop(cx, "add", diag, max(-offset, 0), t.shape))
        elif d == d2:
            coords.append(binop(cx, "add", diag, max(offset, 0), t.shape))
        else:
            coords.append(iota(cx, t.shape, rest.index(d)))
    return take(cx, x, flat_position(cx, coords, src_shape, t.shape), t.shape)


@register("aten.unfold.default")
def lower_unfold(cx, node, x, dimension, size, step):
    """Sliding windows: out[..., w, ..., j] = x[..., w * step + j, ...], the window's own index j
    last (PatchTST's patches, UnivNet's kernel predictor). A view in eager; here a gather from the
    row-major value, which fuses into its readers. Static sizes only (else an extern call, which
    is right on any layout)."""
    t = cx.result(node)
    src_shape = static_shape(cx, cx.shape(x))
    if not src_shape:
        raise NoLowering("unfold of a 0-d tensor")
    d, last = wrap_dim(dimension, len(src_shape)), len(t.shape) - 1
    step = cx.static(step)
    window = binop(cx, "mul", iota(cx, t.shape, d), step, t.shape) if step != 1 else iota(cx, t.shape, d)
    coords = [binop(cx, "add", window, iota(cx, t.shape, last), t.shape) if k == d else iota(cx, t.shape, k)
              for k in range(len(src_shape))]
    return take(cx, x, flat_position(cx, coords, src_shape, t.shape), t.shape)


@register("aten.as_strided.default")
def lower_as_strided(cx, node, x, size, stride, storage_offset=None):
    """A strided read of x's memory (`strided_positions`). Longformer chunks a transposed query
    this way: read as if row-major, LED's attention scores were off by 0.08."""
    t = cx.result(node)
    return take(cx, x, strided_positions(cx, node.args[0], x, t.shape, stride, storage_offset), t.shape)


def strided_positions(cx, arg, x: Ref, shape, stride, storage_offset=None) -> Ref:
    """The row-major flat positions in x of the points of `x.as_strided(shape, stride,
    storage_offset)`. `stride` and `storage_offset` address the storage as eager lays x out
    (`arg`'s traced strides and offset: a transposed view's, say), while every IR value is
    row-major; so a storage position is decoded into x's coordinates through x's traced strides
    and read at that point of the row-major value."""
    strides = [cx.static(s) for s in stride]
    base_strides, base_offset = _traced_layout(cx, arg)
    start = cx.static(storage_offset) if storage_offset is not None else base_offset
    pos = cx.full(start - base_offset, shape, I64)
    for d, st in enumerate(strides):
        if st:
            pos = binop(cx, "add", pos, binop(cx, "mul", iota(cx, shape, d), st, shape), shape)
    if base_strides is None:
        return pos
    x_shape = static_shape(cx, cx.shape(x))
    row_major = [int(v) for v in contiguous_strides(list(x_shape))]
    flat = None  # x's coordinates from the storage position, largest traced stride first
    for d in sorted((d for d, n in enumerate(x_shape) if n > 1), key=lambda d: -base_strides[d]):
        coord = binop(cx, "truediv_floor", pos, base_strides[d], shape)
        pos = binop(cx, "remainder", pos, base_strides[d], shape)
        term = binop(cx, "mul", coord, row_major[d], shape)
        flat = term if flat is None else binop(cx, "add", flat, term, shape)
    return flat if flat is not None else pos


def _traced_layout(cx, arg) -> tuple[list[int] | None, int]:
    """(strides, storage offset) the trace recorded for `arg`, whose storage as_strided reads:
    None for the strides where they are row-major (nothing to decode; sizes may be symbolic);
    NoLowering where its memory is not one dense block (a window or a broadcast), which no
    row-major value can stand for."""
    val = arg.meta.get("val") if hasattr(arg, "meta") else None
    if val is None or not hasattr(val, "stride"):
        return None, 0
    if val.is_contiguous():
        return None, cx.static(val.storage_offset())
    shape = [cx.static(n) for n in val.shape]
    strides = [cx.static(s) for s in val.stride()]
    dims = sorted((d for d, n in enumerate(shape) if n > 1), key=lambda d: strides[d])
    expected = 1
    for d in dims:
        if strides[d] != expected:
            raise NoLowering(f"as_strided of a value laid out with strides {strides} (not one dense block)")
        expected *= shape[d]
    return strides, cx.static(val.storage_offset())
