"""A cat part that is pointwise math is computed at the gathered points, not gathered whole.

`cat` lowers to clamped `take`s (lower_indexing.py), and a take reads its source from memory
(fusion: "a take's source must come from memory"). A part computed just before the cat, as
the rotary embedding's `rotate_half` builds `cat((-x2, x1), -1)`, was therefore written out
whole by a kernel of its own so that the cat's kernel could gather it: two extra kernels per
decoder layer (queries and keys) in Llama, Qwen2, GPT-NeoX and Phi. Gathering the math's
operands instead and applying the math at the gathered points lets the cat's kernel compute
the part itself; the original node is left for any other reader (dead-code elimination drops
it otherwise).

The math moves where its gathered operands make fusion store at most one value, as the part
itself was one: a `full` (rebuilt at the cat's shape) and a value in memory whatever fusion
does (a graph input, a matmul's or library call's result, or a view of one) count nothing,
any other value one; the math may reach MAX_DEPTH pointwise ops deep, but not through a view
(a view's source is read where it is). rotate_half's `-x2` reads one view of the projection.
What is not gathered at all stops it: an `iota` is not in memory, and `rand` draws by
position. A part whose math cannot move is gathered as before.
"""

from __future__ import annotations

from pipec_ir import Ref, kind_of

from .builder import GraphBuilder

MAX_DEPTH = 4  # how many pointwise ops deep a part's math moves below the gather
_NOT_MOVABLE = frozenset({"rand"})  # draws depend on the position they are drawn at
STORED_KINDS = frozenset({"matmul", "extern", "collective"})  # results a library call writes to memory


def producer(cx: GraphBuilder, ref: Ref):
    """The IR node that made `ref` (None for a graph input). Searched from the end: a cat's
    parts are usually made just before it, and lowerings may rename their last node."""
    for node in reversed(cx.nodes):
        if node.name == ref.name:
            return node
    return None


def _root(cx: GraphBuilder, ref: Ref):
    """The node whose result `ref` reads through views (None for a graph input)."""
    node = producer(cx, ref)
    while node is not None and kind_of(node.op) == "view":
        node = producer(cx, Ref(node.inputs[0]))
    return node


def _math(cx: GraphBuilder, ref: Ref, depth: int):
    """The pointwise node making `ref` directly when its math may move, else None."""
    node = producer(cx, ref)
    if depth >= MAX_DEPTH or node is None or kind_of(node.op) != "pointwise" or node.op in _NOT_MOVABLE:
        return None
    return node


def _moved_stores(cx: GraphBuilder, node, depth: int) -> int | None:
    """How many values fusion would store for `node`'s math moved below the gather (None: an
    operand cannot be gathered)."""
    counts = [_stores(cx, Ref(v), depth + 1) for v in node.inputs]
    return None if None in counts else sum(counts)


def _stores(cx: GraphBuilder, ref: Ref, depth: int) -> int | None:
    """How many values reading `ref` at gathered points makes fusion store."""
    node = producer(cx, ref)
    if node is not None and node.op == "full":
        return 0
    math = _math(cx, ref, depth)
    if math is not None:
        moved = _moved_stores(cx, math, depth)
        if moved is not None and moved <= 1:
            return moved
    root = _root(cx, ref)
    if root is None or kind_of(root.op) in STORED_KINDS:
        return 0
    return None if kind_of(root.op) == "creation" else 1


def movable(cx: GraphBuilder, ref: Ref, depth: int = 0) -> bool:
    """Does the math making `ref` run at the gathered points (see the module docstring)?"""
    math = _math(cx, ref, depth)
    if math is None:
        return False
    moved = _moved_stores(cx, math, depth)
    return moved is not None and moved <= 1


def gathered(cx: GraphBuilder, ref: Ref, gather, shape, depth: int = 0) -> Ref:
    """`ref` read at the gathered points: `gather(value)` takes a value of ref's shape to the
    cat's `shape`; math that `movable` allows runs on its gathered operands instead."""
    node = producer(cx, ref)
    if node is not None and node.op == "full":
        return cx.emit("full", [], shape, node.type.dtype, **dict(node.attrs))
    if movable(cx, ref, depth):
        inputs = [gathered(cx, Ref(v), gather, shape, depth + 1) for v in node.inputs]
        return cx.emit(node.op, inputs, shape, node.type.dtype, hint=f"{node.name}_at", **dict(node.attrs))
    return gather(ref)
