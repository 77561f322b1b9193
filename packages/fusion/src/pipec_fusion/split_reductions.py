"""Column sums over many rows, split into a partial sum per block of rows and a sum of the partials.

A training step's bias and layer_norm weight gradients are sums over every token of a few
hundred columns: BERT base sums 4096 rows of 768 columns fifty times a step. One kernel gives
each program a block of columns and walks all the rows, so 768 columns make 12 programs of 64 on
a GPU of 132 SMs: 20 us a call on the H200, where Inductor's split reduction takes 4 (session 7,
docs/performance.md "Where BERT training's step time goes").

Before fusing, each such sum is rewritten as two (the graph stays one of plain IR ops):

    rows  = reshape(x, [S, R/S, *columns])      a view: same elements, same order
    part  = sum(cast(rows, float32), dims=[1])  [S, *columns]: one partial per block of rows
    total = sum(part, dims=[0])                 [*columns], fp32 (float64 sums stay float64)
    node  = cast(total) (+ reshape for keepdim) the original name, type and readers

Fusion then puts what computes x into the first sum's kernel, as it did into the original one,
and whatever reads the total into the second's. The partials are fp32, as the one-kernel sum
accumulated: the two orders of addition differ only by fp32 rounding.
"""

from __future__ import annotations

import math
from dataclasses import replace

import sympy
from pipec_ir import FLOAT_DTYPES, Graph, Node, TensorType, make_attrs

# Split only sums of at least this many rows: below it one kernel's programs already finish quickly.
SPLIT_MIN_ROWS = 4096
# Each partial sums at least this many rows (a block of a few hundred rows keeps loads long).
MIN_ROWS_PER_PART = 256
# Parts x columns to reach: 16384 is 256 programs of 64 columns, about two per SM on an H100/H200.
TARGET_PARALLEL_COLUMNS = 16384
# At most this many partials: the second sum then holds every partial of its columns in registers
# (codegen's persistent column reductions go up to 64 rows).
MAX_PARTS = 64


def parts_for(rows: int, columns: int) -> int:
    """How many partial sums a sum of `rows` rows of `columns` columns is split into (1: none)."""
    if rows < SPLIT_MIN_ROWS or columns >= TARGET_PARALLEL_COLUMNS:
        return 1
    wanted = min(MAX_PARTS, rows // MIN_ROWS_PER_PART, -(-TARGET_PARALLEL_COLUMNS // columns))
    parts = 1
    while parts * 2 <= wanted and rows % (parts * 2) == 0:
        parts *= 2
    return parts


def _split_shape(node: Node, types: dict[str, TensorType]):
    """(rows, column shape) of a sum over the leading dims of a static shape, else None."""
    if node.op != "sum" or len(node.inputs) != 1:
        return None
    source = types[node.inputs[0]]
    shape = tuple(source.shape)
    if not shape or not all(sympy.sympify(s).is_Integer for s in shape) or source.dtype not in FLOAT_DTYPES:
        return None
    dims = sorted(node.attr("dims") or ())
    if not dims or dims != list(range(len(dims))) or len(dims) == len(shape):
        return None  # not a column sum: some reduced dim is inner, or every dim is reduced
    rows = math.prod(int(s) for s in shape[:len(dims)])
    return rows, tuple(int(s) for s in shape[len(dims):])


def split_column_sums(graph: Graph) -> Graph:
    """`graph` with each large column sum split as the module says (the same graph if none is)."""
    types = graph.types()
    taken = set(types)

    def fresh(base: str) -> str:
        name = base
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    nodes, changed = [], False
    for node in graph.nodes:
        found = _split_shape(node, types)
        parts = parts_for(found[0], math.prod(found[1])) if found else 1
        if parts == 1:
            nodes.append(node)
            continue
        rows, columns = found
        changed = True
        dtype = node.type.dtype
        source = types[node.inputs[0]]
        block = (sympy.Integer(parts), sympy.Integer(rows // parts), *map(sympy.Integer, columns))
        acc = "float64" if source.dtype == "float64" else "float32"  # the partials: never narrower than fp32
        made = [Node(fresh(f"{node.name}_rows"), "reshape", node.inputs, TensorType(block, source.dtype))]
        if source.dtype != acc:
            made.append(Node(fresh(f"{node.name}_rows_{acc}"), "cast", (made[-1].name,), TensorType(block, acc)))
        part_shape = (block[0], *block[2:])
        made.append(Node(fresh(f"{node.name}_part"), "sum", (made[-1].name,), TensorType(part_shape, acc),
                         make_attrs(dims=(1,), keepdim=False)))
        made.append(Node(fresh(f"{node.name}_total"), "sum", (made[-1].name,), TensorType(block[2:], acc),
                         make_attrs(dims=(0,), keepdim=False)))
        if dtype != acc:
            made.append(Node(fresh(f"{node.name}_total_cast"), "cast", (made[-1].name,), TensorType(block[2:], dtype)))
        # the original name last: readers and graph outputs see the value they saw
        last = made.pop()
        if tuple(node.type.shape) != tuple(last.type.shape):  # keepdim: the reduced dims back as 1s
            made.append(last)
            last = Node(node.name, "reshape", (last.name,), node.type)
        else:
            last = replace(last, name=node.name)
        nodes.extend(made)
        nodes.append(last)
    return replace(graph, nodes=tuple(nodes)) if changed else graph
