"""Triton source for `take` (docs/IR.md): a load at a position computed inside the kernel.

`take(src, index)` reads src's row-major flattening at `index`. The index is an ordinary
value of the kernel (often int64 arithmetic on `iota`s: the position of a gather, a cat
input, a padded or flipped element). The position is a runtime value, so it enters the
index arithmetic as a symbol printed as the variable holding it; views between `src` and
the buffer it reads are mapped with `pipec_ir.indexing` as for any other load.
"""

from __future__ import annotations

import sympy
from pipec_ir.indexing import view_source_index
from pipec_ir.ops import VIEW, kind_of
from pipec_ir.symbolic import FloorDiv, ModularIndexing, contiguous_strides, index_symbol


class TakeError(Exception):
    """A take whose source is not in memory (fusion legality keeps it out of the kernel)."""


def _unflatten(flat, shape) -> tuple:
    strides = contiguous_strides(shape)
    return tuple(ModularIndexing(FloorDiv(flat, st), size) if k else FloorDiv(flat, st)
                 for k, (st, size) in enumerate(zip(strides, shape)))


def take_value(writer, node, index) -> tuple[str, bool]:
    """(source name of take(src, index) at `index`, whether it lives in the row scope)."""
    src, idx = node.inputs
    found = _coordinates(writer, idx, tuple(writer.types[src].shape), index)
    if found is not None:
        at, inner = found
        position = None
    else:
        position, inner = writer.value(idx, index)
        pos = _runtime_symbol(writer, position)
        at = _unflatten(pos, writer.types[src].shape)
    # map the position through the view chain down to the buffer the kernel reads
    value = src
    while value not in writer.in_ptr:
        producer = writer.nodes.get(value)
        if producer is None or kind_of(producer.op) != VIEW:
            raise TakeError(f"{writer.kernel.name}: take {node.name} reads {value}, which is computed in the "
                            "kernel; its source must be a kernel input")
        at = view_source_index(producer, at, writer.types[producer.inputs[0]])
        value = producer.inputs[0]
    offset = sum((i * s for i, s in zip(at, contiguous_strides(writer.types[value].shape))), sympy.Integer(0))
    mask = "xmask & rmask" if inner else "xmask"
    where = writer.print_index(offset)
    if not sympy.sympify(offset).free_symbols & set(writer.names):
        # the same element for every lane (a one-element source, or one element picked by sizes
        # alone): a block of that offset, as the mask is one
        where += f" + tl.zeros_like({position if position is not None else writer.value(idx, index)[0]})"
    where = writer.check_bounds(writer._scope(inner), value, where, mask, f"take {node.name}")
    text = f"tl.load({writer.in_ptr[value]} + ({where}), mask={mask}, other=0)"
    if writer.types[value].dtype in ("float16", "bfloat16"):
        text += ".to(tl.float32)"
    return writer.emit(writer._scope(inner), text), inner


def _runtime_symbol(writer, var: str) -> sympy.Symbol:
    """An index symbol printed as the kernel variable `var` (a position computed at run time)."""
    sym = index_symbol(f"take_{writer.kernel.name}_{var}")  # never a bounded name (`_lt<n>`)
    writer.names[sym] = var
    return sym


def _coordinates(writer, idx: str, src_shape: tuple, index) -> tuple[tuple, bool] | None:
    """The source coordinates a flat position was built from, or None.

    The lowerings build a take's position as `flat_position`: sum(coord_k * stride_k) over the
    source's dims (capture lower_indexing.py). Reading the coordinates off that
    sum spares the kernel the int64 division and modulo per dim that unflattening the sum takes
    (a rotary embedding's cat: four of each per gathered element). An iota coordinate is its
    index expression; any other is the kernel value it is. The position stays flat where the
    strides are not all different (size-1 dims) or a coordinate is not in range by construction
    (`_in_range`)."""
    strides = [sympy.sympify(st) for st in contiguous_strides(src_shape)]
    if len(set(strides)) != len(strides):
        return None
    by_stride: dict = {}
    for term in _sum_terms(writer, idx):
        coeff, value = _scaled(writer, term)
        if coeff is None or coeff in by_stride:
            return None
        by_stride[coeff] = value
    if set(by_stride) != set(strides) or not all(
            _in_range(writer, by_stride[st], size) for st, size in zip(strides, src_shape)):
        return None
    coords, inner = [], False
    for st in strides:
        coord, coord_inner = _coordinate(writer, by_stride[st], index)
        coords.append(coord)
        inner = inner or coord_inner
    return tuple(coords), inner


def _in_range(writer, name: str, size) -> bool:
    """Is coordinate `name` inside [0, size) by how it is made? An iota 0, 1, ... over a dim no
    longer than `size`, a clamp `minimum(maximum(x, lo), hi)` with 0 <= lo and hi < size (as cat
    and padding make them), or a literal in range. Any other coordinate may be out of range on
    purpose (a max-pool gradient's candidate window, masked after): read flat, it stays inside
    the buffer; mapped through the source's views it might not."""
    node = _computed_here(writer, name)
    if node is None:
        return False
    if node.op == "iota":
        extent = writer.types[name].shape[node.attr("dim")]
        return node.attr("start") == 0 and node.attr("step") == 1 and _provably(size - extent >= 0)
    literal = _int_literal(writer, name)
    if literal is not None:
        return _provably(literal >= 0) and _provably(literal < size)
    if node.op != "minimum":
        return False
    for low_side, hi in (node.inputs, node.inputs[::-1]):
        inner, hi = _computed_here(writer, low_side), _int_literal(writer, hi)
        if inner is None or inner.op != "maximum" or hi is None or not _provably(hi < size):
            continue
        lows = [_int_literal(writer, v) for v in inner.inputs]
        if any(lo is not None and _provably(lo >= 0) for lo in lows):
            return True
    return False


def _provably(relation) -> bool:
    """A size relation that holds for every value of its symbols (sizes are positive)."""
    if relation in (sympy.true, sympy.false):
        return bool(relation)
    return sympy.simplify(relation) is sympy.true


def _computed_here(writer, name: str):
    """The node computing `name` in this kernel (None for a value it loads)."""
    return None if name in writer.in_ptr else writer.nodes.get(name)


def _sum_terms(writer, name: str) -> list[str]:
    node = _computed_here(writer, name)
    if node is not None and node.op == "add":
        return _sum_terms(writer, node.inputs[0]) + _sum_terms(writer, node.inputs[1])
    return [name]


def _int_literal(writer, name: str):
    """The value of an integer `full` computed here (a size expression for a symbolic one)."""
    node = _computed_here(writer, name)
    if node is None or node.op != "full" or node.type.dtype not in ("int64", "int32"):
        return None
    value = node.attr("value")
    value = value.value if hasattr(value, "value") else value
    return sympy.sympify(value) if isinstance(value, int | sympy.Expr) and not isinstance(value, bool) else None


def _scaled(writer, name: str):
    """(c, x) for a term `x * c` of a position (c an integer literal), (1, name) for a bare one."""
    node = _computed_here(writer, name)
    if node is not None and node.op == "mul":
        a, b = node.inputs
        for value, literal in ((a, b), (b, a)):
            c = _int_literal(writer, literal)
            if c is not None:
                return c, value
    if _int_literal(writer, name) is not None:  # a constant coordinate is a term of its own: no stride
        return None, None
    return sympy.Integer(1), name


def _coordinate(writer, name: str, index) -> tuple[sympy.Expr, bool]:
    """A coordinate as an index expression: an iota's is symbolic, anything else a kernel value."""
    node = _computed_here(writer, name)
    if node is not None and node.op == "iota":
        expr = sympy.sympify(node.attr("start") + node.attr("step") * index[node.attr("dim")])
        return expr, writer._has_r([expr])
    var, inner = writer.value(name, index)
    return _runtime_symbol(writer, var), inner
