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
    position, inner = writer.value(idx, index)
    pos = index_symbol(f"take_{writer.kernel.name}_{position}")  # never a bounded name (`_lt<n>`)
    writer.names[pos] = position
    # map the flat position through the view chain down to the buffer the kernel reads
    value, at = src, _unflatten(pos, writer.types[src].shape)
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
    if pos not in sympy.sympify(offset).free_symbols:  # a one-element source: a block of its one offset
        where += f" + tl.zeros_like({position})"
    where = writer.check_bounds(writer._scope(inner), value, where, mask, f"take {node.name}")
    text = f"tl.load({writer.in_ptr[value]} + ({where}), mask={mask}, other=0)"
    if writer.types[value].dtype in ("float16", "bfloat16"):
        text += ".to(tl.float32)"
    return writer.emit(writer._scope(inner), text), inner
