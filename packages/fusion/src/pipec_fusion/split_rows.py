"""Long reductions over few rows, split into partials per block of each row and a combine of them.

A reduction kernel gives each row to one program. A group norm over a UNet's activations has
few rows and long ones: SD 1.5's first group norms reduce 2 x 32 groups of 10 x 4096 values, so
64 programs walk 40960 values each, and most of an H200's 132 SMs sit idle. Its statistics
kernels took 56 us a call under CUDA Graphs where Inductor's split reductions took about 6
(session 36 profile, docs/performance.md).

Before fusing, such a sum is rewritten so that each row is reduced in `S` blocks. The largest
reduced dim (a UNet's pixels, a sequence; the last of equal ones) is reshaped into `[S, L]`, and `S`
becomes a kept dim of a first reduction; a second one sums the `S` partials. A block is `L`
consecutive indices of that dim, a contiguous run of memory in a row-major tensor and a range of
whole pixels in a channels-last one, so the block's loads stay as coalesced as the row's were.

A plain sum `s = sum(x)` becomes

    xr   = reshape(x, [..., S, L, ...])        the split dim; same elements, same order
    part = sum(xr, dims=reduced, keepdim)      one partial per row and block
    s    = reshape(sum(part, dims=[S's dim]))  the original name, type and readers

A mean and variance computed as Welford's pair (`m = sum(x) / n`, then `sum((x - m)**2)`, which
codegen's row loops compute in one pass) keep that one pass in the first stage: each block's mean
`bm` and squared-deviation sum `b2` (the same pair over the block), then Chan et al.'s combine,

    sum((x - m)**2) = sum(b2) + L' * sum((bm - m)**2)      (L' = the block's element count)

so the input is read once, as before, and no variance is formed as a difference of large sums.

Only float32 and float64 sums with static sizes are split: the partials keep the sum's dtype,
which is what the one-kernel sum accumulated in. A sum reading another reduction of the same rows
(a softmax's sum after its max) is left whole: codegen runs that pair in one pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import sympy
from pipec_ir import Graph, Node, TensorType, make_attrs
from pipec_ir.ops import POINTWISE, REDUCTION, VIEW, kind_of

# Rows at most this many leave SMs idle (132 on an H100/H200) once each holds one program.
MAX_ROWS = 128
# A row shorter than this is read by one program quickly enough.
MIN_ROW = 16384
# Rows x blocks to reach: about four programs per SM.
TARGET_PROGRAMS = 512
# A block is at least this many consecutive elements (long contiguous loads) ...
MIN_BLOCK = 256
# ... and the second stage sums at most this many partials (held in registers).
MAX_BLOCKS = 64
SPLIT_DTYPES = ("float32", "float64")
_CONE_LIMIT = 256  # nodes looked at behind a sum for a reduction of the same rows


@dataclass(frozen=True)
class RowSplit:
    """How a sum over `dims` of a tensor of `shape` is split: `dim` into `blocks` x its rest."""
    shape: tuple[int, ...]
    dims: tuple[int, ...]
    dim: int
    blocks: int

    @property
    def split_shape(self) -> tuple[int, ...]:
        s = self.shape
        return (*s[:self.dim], self.blocks, s[self.dim] // self.blocks, *s[self.dim + 1:])

    @property
    def reduced(self) -> tuple[int, ...]:
        """The first stage's reduced dims in `split_shape`: the block dim stays kept."""
        return tuple(d if d < self.dim else d + 1 for d in self.dims)

    @property
    def block_count(self) -> int:
        """Elements each partial reduces."""
        return math.prod(self.shape[d] for d in self.dims) // self.blocks


def plan_row_split(shape: tuple[int, ...], dims: tuple[int, ...]) -> RowSplit | None:
    """The split of a sum of `shape` over `dims`, or None where one program per row is enough."""
    rows = math.prod(s for d, s in enumerate(shape) if d not in dims)
    if rows > MAX_ROWS or math.prod(shape[d] for d in dims) < MIN_ROW:
        return None
    dim = max(dims, key=lambda d: (shape[d], d))
    run = math.prod(shape[dim:])  # a row-major block: `run / blocks` consecutive elements
    wanted = min(MAX_BLOCKS, TARGET_PROGRAMS // rows, run // MIN_BLOCK, shape[dim])
    blocks = 1
    while blocks * 2 <= wanted and shape[dim] % (blocks * 2) == 0:
        blocks *= 2
    return RowSplit(shape, dims, dim, blocks) if blocks > 1 else None


def _static(shape) -> tuple[int, ...] | None:
    exprs = [sympy.sympify(s) for s in shape]
    return tuple(int(e) for e in exprs) if all(e.is_Integer for e in exprs) else None


class _Writer:
    """New nodes with fresh names, appended to `out`."""

    def __init__(self, graph: Graph, out: list[Node]):
        self.taken = set(graph.types())
        self.out = out

    def add(self, base: str, op: str, inputs: tuple[str, ...], shape, dtype: str, **attrs) -> str:
        name = base
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        kind = TensorType(tuple(sympy.Integer(s) for s in shape), dtype)
        self.out.append(Node(name, op, inputs, kind, make_attrs(**attrs) if attrs else ()))
        return name

    def divide(self, base: str, value: str, count: int, shape, dtype: str) -> str:
        full = self.add(f"{base}_count", "full", (), shape, dtype, value=float(count))
        return self.add(base, "div", (value, full), shape, dtype)

    def sum_blocks(self, base: str, value: str, shape, dtype: str, split: RowSplit, keepdim: bool) -> str:
        """`value` (of the partials' shape) summed over the blocks: with `keepdim`, every dim
        kept as 1; without, to the kept dims (the original sum's shape, which a reduction kernel
        can store)."""
        if keepdim:
            out = [1 if d == split.dim else s for d, s in enumerate(shape)]
            return self.add(base, "sum", (value,), out, dtype, dims=(split.dim,), keepdim=True)
        dims = tuple(sorted((*split.reduced, split.dim)))
        out = [s for d, s in enumerate(shape) if d not in dims]
        return self.add(base, "sum", (value,), out, dtype, dims=dims, keepdim=False)


def _square_of_deviation(nodes: dict[str, Node], total: Node) -> tuple[str, str, str, tuple[str, ...]] | None:
    """For `total = sum((x - expand(m)) ** 2)` with `m = div(s, full)`: (x, s's name, m's name,
    the square, the deviation and the views of m between them: what only `total` may read)."""
    sq = nodes.get(total.inputs[0])
    if sq is None or sq.op != "mul" or sq.inputs[0] != sq.inputs[1]:
        return None
    sub = nodes.get(sq.inputs[0])
    if sub is None or sub.op != "sub":
        return None
    chain = [sq.name, sub.name]
    mean = nodes.get(sub.inputs[1])
    while mean is not None and mean.op in ("expand", "reshape"):
        chain.append(mean.name)
        mean = nodes.get(mean.inputs[0])
    if mean is None or mean.op != "div":
        return None
    first, count = nodes.get(mean.inputs[0]), nodes.get(mean.inputs[1])
    if first is None or first.op != "sum" or count is None or count.op != "full":
        return None
    return sub.inputs[0], first.name, mean.name, tuple(chain)


def split_row_reductions(graph: Graph) -> Graph:
    """`graph` with each long sum over few rows split as the module says (the same graph if none is)."""
    types, nodes = graph.types(), graph.node_map()
    out: list[Node] = []
    write = _Writer(graph, out)
    firsts: dict[str, tuple[RowSplit, str, str, str]] = {}  # a split sum -> (split, input, input split, partials)
    orphans: set[str] = set()  # nodes only a rewritten Welford sum read: dropped if nothing else does
    for node in graph.nodes:
        split = _split_of(node, types)
        if split is None:
            out.append(node)
            continue
        x, dtype = node.inputs[0], node.type.dtype
        shape, reduced = split.split_shape, split.reduced
        part_shape = [1 if d in reduced else s for d, s in enumerate(shape)]
        keepdim = bool(node.attr("keepdim"))
        row_shape = [1 if d == split.dim else s for d, s in enumerate(part_shape)]  # every reduced dim 1
        total_shape = row_shape if keepdim else [s for d, s in enumerate(shape) if d not in reduced and d != split.dim]
        pair = _square_of_deviation(nodes, node)
        first = firsts.get(pair[1]) if pair is not None else None
        welford = first is not None and first[0] == split and first[1] == pair[0]
        if not welford and _follows_a_row_reduction(nodes, types, node):
            out.append(node)  # a softmax's sum after its max: one looped kernel keeps both
            continue
        if welford:
            # Welford's pair: each block's squared deviations from its own mean, combined with the
            # spread of the block means around the row's mean (Chan et al.)
            xr, block_sum = first[2:]
            block_mean = write.divide(f"{node.name}_bmean", block_sum, split.block_count, part_shape, dtype)
            deviation = write.add(f"{node.name}_dev", "sub", (xr, write.add(
                f"{node.name}_bmean_x", "expand", (block_mean,), shape, dtype)), shape, dtype)
            squares = write.add(f"{node.name}_sq", "mul", (deviation, deviation), shape, dtype)
            block_m2 = write.add(f"{node.name}_part", "sum", (squares,), part_shape, dtype, dims=reduced,
                                 keepdim=True)
            mean = write.add(f"{node.name}_mean", "reshape", (pair[2],), row_shape, dtype)
            spread = write.add(f"{node.name}_spread", "sub", (block_mean, write.add(
                f"{node.name}_mean_b", "expand", (mean,), part_shape, dtype)), part_shape, dtype)
            spread_sq = write.add(f"{node.name}_spread_sq", "mul", (spread, spread), part_shape, dtype)
            within = write.sum_blocks(f"{node.name}_within", block_m2, part_shape, dtype, split, keepdim)
            between = write.sum_blocks(f"{node.name}_between", spread_sq, part_shape, dtype, split, keepdim)
            weight = write.add(f"{node.name}_block_n", "full", (), total_shape, dtype, value=float(split.block_count))
            weighted = write.add(f"{node.name}_between_n", "mul", (between, weight), total_shape, dtype)
            total = write.add(f"{node.name}_total", "add", (within, weighted), total_shape, dtype)
            orphans.update(pair[3])
        else:
            xr = write.add(f"{node.name}_rows", "reshape", (x,), shape, types[x].dtype)
            part = write.add(f"{node.name}_part", "sum", (xr,), part_shape, dtype, dims=reduced, keepdim=True)
            firsts[node.name] = (split, x, xr, part)
            total = write.sum_blocks(f"{node.name}_total", part, part_shape, dtype, split, keepdim)
        if keepdim:
            out.append(Node(node.name, "reshape", (total,), node.type))
        else:  # the combine made the sum's own shape: it takes the name
            out[-1] = replace(out[-1], name=node.name)
    if len(out) == len(graph.nodes):
        return graph
    return replace(graph, nodes=tuple(_drop_unread(out, orphans, set(graph.results()))))


def _follows_a_row_reduction(nodes: dict[str, Node], types: dict[str, TensorType], node: Node) -> bool:
    """Does `node` (a sum) read, through pointwise math and views, another reduction of rows like
    its own (same input shape, same dims): a softmax's `sum(exp(x - max(x)))`? Codegen runs such a
    pair in one pass (online softmax); split, the sum would cost a pass and two kernels more."""
    shape, dims = types[node.inputs[0]].shape, tuple(sorted(node.attr("dims") or ()))
    stack, seen = [node.inputs[0]], set()
    while stack and len(seen) < _CONE_LIMIT:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        n = nodes[name]
        kind = kind_of(n.op)
        if kind == REDUCTION:
            if types[n.inputs[0]].shape == shape and tuple(sorted(n.attr("dims") or ())) == dims:
                return True
            continue
        if kind in (POINTWISE, VIEW):
            stack.extend(n.inputs)
    return False


def _split_of(node: Node, types: dict[str, TensorType]) -> RowSplit | None:
    if node.op != "sum" or len(node.inputs) != 1 or node.type.dtype not in SPLIT_DTYPES:
        return None
    source = types[node.inputs[0]]
    shape = _static(source.shape)
    dims = tuple(sorted(node.attr("dims") or ()))
    if shape is None or not dims or source.dtype != node.type.dtype:
        return None
    return plan_row_split(shape, dims)


def _drop_unread(nodes: list[Node], candidates: set[str], results: set[str]) -> list[Node]:
    """`nodes` without the `candidates` that nothing reads (in turn: a square, then its deviation)."""
    while True:
        read = {i for n in nodes for i in n.inputs} | results
        gone = {n.name for n in nodes if n.name in candidates and n.name not in read}
        if not gone:
            return nodes
        nodes = [n for n in nodes if n.name not in gone]
