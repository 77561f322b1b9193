"""Recompute a cheap stored value in the kernel that reads it, instead of storing it.

After merging, a kernel may store a value only because another kernel reads it. layer_norm's
backward (AOTAutograd's graph) stores the output gradient cast to fp32 and gradient x x_hat in
fp32, 4 bytes written and 4 read per element each, for the column sums of the bias and weight
gradients. Recomputed in those sums they read the bf16 gradient (2 bytes) and the bf16 gradient
and input (4 bytes; mean and rstd are per row), and nothing is written.

A candidate is (value, reading kernel): the value is stored by kernel G and read, directly or
through views, by a Triton kernel H (pointwise or reduction); its *cone*, the members of G it is
computed from back to G's inputs, holds only pointwise and creation nodes. The heuristics decide
(`Heuristics.recompute_stored`) from the cone's ops and the bytes per element each way: the
cone's inputs as large as the value (broadcast ones are cache hits and count nothing) against
the value itself.

Accepted candidates rewrite the graph: the cone, and the views between the value and its readers
in H, are copied under new names and H's readers switched to the copies; then fusion runs again
on the new graph. A copy that does not end up in its readers' kernel drops its candidate and
fusion runs again without it, so the pass never adds a kernel; the plan's graph is the rewritten
graph.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipec_ir import ITEMSIZE, Graph, kind_of

from .analysis import GraphAnalysis
from .heuristics import Heuristics

# An input at least this many times smaller than the value is read through a broadcast: it
# stays in the cache, so recomputing does not pay for it again (heuristics.CHEAP_RECOMPUTE_RATIO).
_BROADCAST_RATIO = 16


@dataclass(frozen=True)
class Candidate:
    value: str  # the stored node
    cone: tuple[str, ...]  # the members of its kernel it is computed from (itself included), graph order
    readers: tuple[str, ...]  # the nodes of the reading kernel that read it, graph order


def find_candidates(an: GraphAnalysis, groups: dict, owner: dict, heuristics: Heuristics) -> list[Candidate]:
    """Every (stored value, reading kernel) pair the heuristics want recomputed."""
    out = []
    for value in an.compute:
        if value not in owner or an.nodes[value].op == "getitem":
            continue
        home = owner[value]
        by_group: dict[int, list[str]] = {}
        for reader in an.readers.get(value, ()):
            if owner.get(reader) is not None and owner[reader] != home:
                by_group.setdefault(owner[reader], []).append(reader)
        if not by_group:
            continue
        cone = _cone(an, groups[home].members, value)
        if cone is None:
            continue
        ops = tuple(an.nodes[n].op for n in cone)
        read_bytes = _leaf_bytes(an, cone, value)
        stored = ITEMSIZE.get(an.types[value].dtype, 4)
        if not heuristics.recompute_stored(ops, read_bytes, stored):
            continue
        for gid, readers in sorted(by_group.items()):
            if groups[gid].kind in ("pointwise", "reduction") and not _gathers_from(an, readers, value):
                out.append(Candidate(value, cone, tuple(sorted(readers, key=an.pos))))
    return out


def _gathers_from(an: GraphAnalysis, readers, value) -> bool:
    """Does one of `readers` gather from `value`? A take's source must come from memory
    (legality), so the copy could never join that kernel: the candidate would only cost a
    fusion pass (a 24-layer Qwen2's rotary casts: 48 candidates, none landing)."""
    return any(an.nodes[r].op == "take" and an.root[an.nodes[r].inputs[0]] == value for r in readers)


def _cone(an: GraphAnalysis, members, value) -> tuple[str, ...] | None:
    """The members `value` is computed from (pointwise and creation nodes only), else None."""
    cone, stack = set(), [value]
    while stack:
        name = stack.pop()
        if name in cone:
            continue
        if kind_of(an.nodes[name].op) not in ("pointwise", "creation"):
            return None
        cone.add(name)
        stack.extend(an.root[v] for v in an.nodes[name].inputs if an.root[v] in members)
    return tuple(sorted(cone, key=an.pos))


def _leaf_bytes(an: GraphAnalysis, cone, value) -> int:
    """Bytes per element of `value` that recomputing it reads: its cone's inputs, except small ones."""
    size = an.numel_hint(an.shape(value))
    leaves = {an.root[v] for n in cone for v in an.nodes[n].inputs} - set(cone)
    return sum(ITEMSIZE.get(an.types[leaf].dtype, 4) for leaf in leaves
               if an.numel_hint(an.shape(leaf)) * _BROADCAST_RATIO > size)


def rewrite(graph: Graph, an: GraphAnalysis, candidates: list[Candidate]) -> tuple[Graph, dict]:
    """`graph` with each candidate's cone copied for its readers; {candidate: copy of its value}."""
    taken = set(an.nodes) | an.input_names
    inserts: dict[str, list] = {}  # a node name -> the copies that go right before it
    rewired: dict[str, dict[str, str]] = {}  # reader -> {input value: its copy}
    copies = {}
    for k, cand in enumerate(candidates):
        copier = _ConeCopier(an, set(cand.cone), f"_rc{k}", taken)
        for reader in cand.readers:
            for v in an.nodes[reader].inputs:
                if an.root[v] == cand.value:
                    rewired.setdefault(reader, {})[v] = copier.copy_of(v)
        inserts.setdefault(cand.readers[0], []).extend(copier.made)
        copies[cand] = copier.renamed[cand.value]
    nodes = []
    for node in graph.nodes:
        nodes.extend(inserts.get(node.name, ()))
        if node.name in rewired:
            node = replace(node, inputs=tuple(rewired[node.name].get(v, v) for v in node.inputs))
        nodes.append(node)
    return replace(graph, nodes=tuple(nodes)), copies


class _ConeCopier:
    """Copies of a cone's nodes under fresh names, made on demand, inputs before readers."""

    def __init__(self, an: GraphAnalysis, cone: set, suffix: str, taken: set):
        self.an, self.cone, self.suffix, self.taken = an, cone, suffix, taken
        self.renamed: dict[str, str] = {}
        self.made: list = []  # the new nodes, in an order that keeps the graph topological

    def copy_of(self, value: str) -> str:
        """`value` read from the copied cone; a leaf (not computed in the cone) reads as before."""
        if value in self.renamed:
            return self.renamed[value]
        node = self.an.nodes.get(value)
        if node is None or self.an.root[value] not in self.cone:
            return value
        # a cone member, or a view of one on the way from it
        inputs = tuple(self.copy_of(v) for v in node.inputs)
        name = value + self.suffix
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        self.made.append(replace(node, name=name, inputs=inputs))
        self.renamed[value] = name
        return name


def landed(owner: dict[str, int], cand: Candidate, copy: str) -> bool:
    """Did the value's copy end up in the kernel of the nodes that read it? `owner`: the group
    (one kernel) of each computing node after merging; the copy and its readers compute, so each
    is in its group's kernel and no other (views may be in several)."""
    return all(owner.get(copy) == owner.get(r) for r in cand.readers)
