"""A cat part that is pointwise math is computed at the gathered points, not gathered whole.

`cat` lowers to one clamped gather per part (lower_indexing.py): output point p reads the part
at p with the cat dim's coordinate replaced by `local(p)`. A gather (`take`) reads its source
from memory (fusion: "a take's source must come from memory"), so a part computed just before
the cat was written out whole by a kernel of its own for the cat's kernel to read. The rotary
embedding does this twice a layer per tensor: `rotate_half` is `cat((-x2, x1), -1)`, and a
partial rotary (GPT-NeoX, Phi) concatenates the rotated dims with the others after.

Instead, the part's math runs at the gathered points, on its operands read there:

* a `full` is rebuilt at the cat's shape;
* `iota` along the cat dim reads `local(p)`, along any other dim it is the output's own iota;
* a `take(src, idx)` stays a take of `src` at `idx` read there (its source is in memory already);
* pointwise math (not `rand`, which draws by position) moves, operand by operand;
* anything else (a view of a value, a reduction, a library call's result) is gathered from
  memory as before.

The move is made where it makes fusion store at most one value, as the part itself was one:
graph inputs and library results (through views) are in memory whatever fusion does, and a
value at most 1/SMALL_FRACTION of the cat's size (a rotary cos/sin table, read by every layer)
costs little to store; any other value gathered counts one. The original nodes stay for other
readers (dead-code elimination drops them otherwise).
"""

from __future__ import annotations

import sympy

from pipec_ir import Ref, kind_of

from .builder import GraphBuilder

MAX_DEPTH = 24  # ops deep a part's math may be followed (index arithmetic nests deep)
# The cat's kernel evaluates every part at every output point (a `where` per part boundary), so
# moved math is paid once per part: past this many parts, parts are gathered as they are.
MAX_PARTS = 4
SMALL_FRACTION = 8  # a value this many times smaller than the cat costs little to store
STORED_KINDS = frozenset({"matmul", "extern", "collective"})  # results a library call writes to memory
_NOT_MOVABLE = frozenset({"rand"})  # draws depend on the position they are drawn at


class PartGather:
    """Reading parts of one cat at gathered points: `local` (int64, the cat's shape) is the
    coordinate along `dim` each output point reads; `gather(value)` reads a value of the part's
    shape from memory there."""

    def __init__(self, cx: GraphBuilder, nodes: dict, dim: int, local: Ref, shape, gather):
        self.cx, self.dim, self.local, self.shape, self.gather = cx, dim, local, tuple(shape), gather
        self.nodes = nodes  # name -> node, for the nodes made before the cat (`producers`)
        self.numel = _numel(self.shape)
        self._stores: dict[str, int | None] = {}
        self._moved: set[str] = set()  # the pointwise nodes whose math `stores` chose to move
        self._made: dict[str, Ref] = {}

    def read(self, ref: Ref) -> Ref:
        """`ref` (a part) read at the gathered points."""
        if self.nodes.get(ref.name) is None or not _movable_op(self.nodes[ref.name]):
            return self.gather(ref)
        return self._read(ref, 0)

    # ------------------------------------------------------------ the cost of moving

    def stores(self, ref: Ref, depth: int) -> int | None:
        """How many values reading `ref` at the gathered points makes fusion store (None: it
        cannot be read there)."""
        if ref.name not in self._stores:
            self._stores[ref.name] = self._count(ref, depth)
        return self._stores[ref.name]

    def _count(self, ref: Ref, depth: int) -> int | None:
        node = self.nodes.get(ref.name)
        if node is not None and (node.op == "full" or (node.op == "iota" and _plain_iota(node))):
            return 0  # rebuilt at the cat's shape at any depth (`_make`)
        if node is not None and depth < MAX_DEPTH:
            if node.op == "take":
                return self.stores(Ref(node.inputs[1]), depth + 1)
            if _movable_op(node):
                counts = [self.stores(Ref(v), depth + 1) for v in node.inputs]
                if None not in counts and sum(counts) <= 1:
                    self._moved.add(ref.name)
                    return sum(counts)
        return self._from_memory(ref)

    def _from_memory(self, ref: Ref) -> int | None:
        """The cost of gathering `ref` itself: 0 when it is in memory anyway or small, 1 for any
        other computed value, None for one created in a kernel that cannot be rebuilt here (an iota
        other than 0, 1, 2, ...: it is not in memory)."""
        root = self.nodes.get(ref.name)
        while root is not None and kind_of(root.op) == "view":
            root = self.nodes.get(root.inputs[0])
        if root is None or kind_of(root.op) in STORED_KINDS:
            return 0
        if kind_of(root.op) == "creation":
            return None
        ratio = sympy.sympify(self.numel / _numel(root.type.shape))
        return 0 if ratio.is_number and ratio >= SMALL_FRACTION else 1

    # ------------------------------------------------------------ the moved math

    def _read(self, ref: Ref, depth: int) -> Ref:
        made = self._made.get(ref.name)
        if made is None:
            made = self._made[ref.name] = self._make(ref, depth)
        return made

    def _make(self, ref: Ref, depth: int) -> Ref:
        cx, node = self.cx, self.nodes.get(ref.name)
        if node is not None and node.op == "full":
            return cx.emit("full", [], self.shape, node.type.dtype, **dict(node.attrs))
        if node is not None and node.op == "iota" and _plain_iota(node):
            if node.attr("dim") == self.dim:
                return cx.cast(self.local, node.type.dtype)
            return cx.emit("iota", [], self.shape, node.type.dtype, **dict(node.attrs))
        if node is not None and depth < MAX_DEPTH:
            if node.op == "take" and self.stores(Ref(node.inputs[1]), depth + 1) is not None:
                idx = self._read(Ref(node.inputs[1]), depth + 1)
                return cx.emit("take", [Ref(node.inputs[0]), idx], self.shape, node.type.dtype,
                               hint=f"{node.name}_at", **dict(node.attrs))
            self.stores(ref, depth)
            if ref.name in self._moved:
                inputs = [self._read(Ref(v), depth + 1) for v in node.inputs]
                return cx.emit(node.op, inputs, self.shape, node.type.dtype, hint=f"{node.name}_at",
                               **dict(node.attrs))
        return self.gather(ref)


def _movable_op(node) -> bool:
    return kind_of(node.op) == "pointwise" and node.op not in _NOT_MOVABLE


def _plain_iota(node) -> bool:
    """An iota 0, 1, 2, ... (its value is its coordinate)."""
    return node.attr("start") == 0 and node.attr("step") == 1


def producers(cx: GraphBuilder) -> dict:
    """name -> node of what `cx` has emitted (the lowering's last node may be renamed after it
    returns, so this is taken anew for each cat)."""
    return {n.name: n for n in cx.nodes}


def _numel(shape):
    """Elements of `shape`, a size expression where sizes are symbolic (their ratio cancels)."""
    n = sympy.Integer(1)
    for s in shape:
        n *= sympy.sympify(s)
    return n
