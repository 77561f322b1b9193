"""Tensors made twice, made once: a node that repeats an earlier node (same op, same inputs up
to repeats, same attributes, same type), where both would be written to memory anyway, is
dropped and its readers read the earlier one.

Traced models repeat work that eager PyTorch repeats too. BERT converts its boolean attention
mask to the additive float mask SDPA takes once per layer, inside each attention call: twelve
`where(mask, 0, -inf)` nodes over [batch, 1, seq, seq] (8 MiB each at 8 x 512 in fp32), each
written for its library call; T5 clones its position bias for each layer's matmul. Dropping
the copies saves those kernels and their memory, and fusion's time on them: the mask's producer
absorbed one `where` per layer, a legality check of a group growing with the depth each time.

Only values a library call reads (an extern, a matmul's operand, a collective; through views
too) are dropped, and only for values a library call reads: those are written to memory
whatever fusion does. A repeat that pointwise code reads, such as a Llama's causal mask or an
embedding gradient's flat index, is computed again inside each reading kernel, which costs no
memory traffic; sharing it would make one kernel store it and the others load it (tried: a T5
training step's backward wrote a third more bytes). Nodes are compared up to repeats: each
layer's `where` reads its own `full(0)` and `full(-inf)`, so those count as the first layer's.

Every IR op but a library call (its result, through `getitem`, may come from a call with
effects) and a collective (communication is an event, not a value) is a function of its inputs
and attributes; `rand` too, whose seed and offset are inputs and attributes. A graph output is
never dropped, so each returned tensor stays a tensor of its own.

Runs before fusion, once per plan (fusion's `none` policy keeps the graph as captured); the
plan's graph is the graph without the dropped nodes (what only they read is left dead, and
fusion skips dead nodes).
"""

from __future__ import annotations

from dataclasses import replace

from pipec_ir import Graph, kind_of, renamed_refs
from pipec_ir.ops import MATMUL_OPS, VIEW_OPS

# kinds whose results are not a function of their inputs alone (getitem is an extern's result)
_IMPURE_KINDS = ("extern", "collective")


def merge_common_values(graph: Graph) -> tuple[Graph, dict[str, str]]:
    """(`graph` with repeated library-read nodes dropped, {dropped node: the node its readers now read})."""
    same = _repeats(graph)
    library_read = _read_by_library(graph)
    outputs = set(graph.results())
    dropped = {name: first for name, first in same.items()
               if name not in outputs and name in library_read and first in library_read}
    if not dropped:
        return graph, dropped
    nodes = []
    for node in graph.nodes:
        if node.name in dropped:
            continue
        if any(v in dropped for v in node.inputs):
            node = replace(node, inputs=tuple(dropped.get(v, v) for v in node.inputs),
                           attrs=renamed_refs(node.attrs, dropped))  # an extern names its tensors there too
        nodes.append(node)
    return replace(graph, nodes=tuple(nodes)), dropped


def _repeats(graph: Graph) -> dict[str, str]:
    """{node: the earliest node it repeats}, comparing inputs up to repeats (value numbering)."""
    first: dict[tuple, str] = {}  # a node's facts, its inputs by their first occurrence -> that node
    same: dict[str, str] = {}
    for node in graph.nodes:
        if kind_of(node.op) in _IMPURE_KINDS:
            continue
        facts = (node.op, tuple(same.get(v, v) for v in node.inputs), node.type, node.attrs)
        earlier = first.setdefault(facts, node.name)
        if earlier != node.name:
            same[node.name] = earlier
    return same


def _read_by_library(graph: Graph) -> set[str]:
    """The nodes a library call reads as a tensor, directly or through views."""
    read: set[str] = set()
    for node in reversed(graph.nodes):  # readers before what they read
        library = kind_of(node.op) in _IMPURE_KINDS or node.op in MATMUL_OPS
        if library or (node.op in VIEW_OPS and node.name in read):
            read.update(node.inputs)
    return read
