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
    # (member, the kept store holding the same elements) for each cone input read from its copy
    aliases: tuple[tuple[str, str], ...] = ()


def find_candidates(an: GraphAnalysis, groups: dict, owner: dict, heuristics: Heuristics) -> list[Candidate]:
    """Every (stored value, reading kernel) pair the heuristics want recomputed.

    Two rounds: the first copies cones back to their kernel's inputs; the second, for values the
    first left stored, stops a cone at the kernel's stores that stay (`stores_that_stay`)."""
    stored_values = stored_for_others(an, groups, owner)
    out = _round(an, groups, heuristics, stored_values, lambda value, members: (frozenset(), {}))
    copied = {c.value for c in out}
    left = {v: where for v, where in stored_values.items() if v not in copied}
    return out + _round(an, groups, heuristics, left, stores_that_stay(an, stored_values, copied))


def stored_for_others(an: GraphAnalysis, groups: dict, owner: dict) -> dict[str, tuple[int, dict]]:
    """{value: (its kernel's id, {reading kernel's id: its nodes reading the value})} for every
    value a kernel stores for other kernels."""
    out = {}
    for value in an.compute:
        if value not in owner or an.nodes[value].op == "getitem":
            continue
        home = owner[value]
        by_group: dict[int, list[str]] = {}
        for reader in an.readers.get(value, ()):
            if owner.get(reader) is not None and owner[reader] != home:
                by_group.setdefault(owner[reader], []).append(reader)
        if by_group:
            out[value] = (home, by_group)
    return out


def stores_that_stay(an: GraphAnalysis, stored_values: dict, copied: set):
    """`kept(value, members)` for the second round: (the members other than `value` stored for
    other kernels or as graph outputs and not recomputed in the first round, the members whose
    elements one of those holds: `_stored_copies`)."""
    def kept(value, members):
        stays = {m for m in members if m != value and (m in stored_values or m in an.forced_store) and m not in copied}
        return stays, _stored_copies(an, members, stays)
    return kept


def _round(an: GraphAnalysis, groups: dict, heuristics: Heuristics, stored_values: dict, kept) -> list[Candidate]:
    """The candidates among `stored_values` whose cone, stopped at the stores `kept(value,
    members)` gives (with the members whose elements one of them holds), the heuristics want
    recomputed."""
    out = []
    for value, (home, by_group) in stored_values.items():
        members = groups[home].members
        stays, copies = kept(value, members)
        cone = _cone(an, members, value, stays, copies)
        if cone is None:
            continue
        ops = tuple(an.nodes[n].op for n in cone)
        read_bytes = _leaf_bytes(an, cone, value)
        stored = ITEMSIZE.get(an.types[value].dtype, 4)
        if not heuristics.recompute_stored(ops, read_bytes, stored):
            continue
        used = sorted({v for n in cone for v in an.nodes[n].inputs if v in copies})
        for gid, readers in sorted(by_group.items()):
            if groups[gid].kind in ("pointwise", "reduction") and not _gathers_from(an, readers, value):
                out.append(Candidate(value, cone, tuple(sorted(readers, key=an.pos)),
                                     tuple((v, copies[v]) for v in used)))
    return out


def _stored_copies(an: GraphAnalysis, members, stays) -> dict[str, str]:
    """{member: a store in `stays` holding its elements}: `identity(x)` where x is the member seen
    through permutes that undo each other (SD's up-block cat, kept in bf16 for the shortcut
    convolution as identity(permute(permute(cat))), while its fp32 cast feeds a group norm)."""
    out = {}
    for store in stays:
        node = an.nodes[store]
        if node.op != "identity":
            continue
        x, order = node.inputs[0], None
        while an.is_view(x) and an.nodes[x].op == "permute":
            dims = tuple(an.nodes[x].attr("dims"))
            order = dims if order is None else tuple(dims[i] for i in order)
            x = an.nodes[x].inputs[0]
        if (x in members and x not in stays and an.shape(x) == an.shape(store)
                and an.types[x].dtype == an.types[store].dtype
                and (order is None or order == tuple(range(len(order))))):
            out.setdefault(x, store)
    return out


def _gathers_from(an: GraphAnalysis, readers, value) -> bool:
    """Does one of `readers` gather from `value`? A take's source must come from memory
    (legality), so the copy could never join that kernel: the candidate would only cost a
    fusion pass (a 24-layer Qwen2's rotary casts: 48 candidates, none landing)."""
    return any(an.nodes[r].op == "take" and an.root[an.nodes[r].inputs[0]] == value for r in readers)


def _cone(an: GraphAnalysis, members, value, kept=frozenset(), copies=None) -> tuple[str, ...] | None:
    """The members `value` is computed from (pointwise and creation nodes only) back to the
    kernel's inputs and its `kept` stores, else None. A kept store is read from memory by the
    copy: SD's residual sum is stored in bf16 for the skip path and its fp32 cast for the group
    norm after it; the norm's kernels read the bf16 sum (2 bytes) and widen it themselves, where
    the cast was written and read at 4. A member read directly whose elements a kept store also
    holds (`copies`: member -> store) is read from that store."""
    cone, stack = set(), [value]
    while stack:
        name = stack.pop()
        if name in cone:
            continue
        if kind_of(an.nodes[name].op) not in ("pointwise", "creation"):
            return None
        cone.add(name)
        stack.extend(an.root[v] for v in an.nodes[name].inputs
                     if an.root[v] in members and an.root[v] not in kept and v not in (copies or ()))
    return tuple(sorted(cone, key=an.pos))


def _leaf_bytes(an: GraphAnalysis, cone, value) -> int:
    """Bytes per element of `value` that recomputing it reads: its cone's inputs, except small ones."""
    size = an.numel_hint(an.shape(value))
    leaves = {an.root[v] for n in cone for v in an.nodes[n].inputs} - set(cone)
    return sum(ITEMSIZE.get(an.types[leaf].dtype, 4) for leaf in leaves
               if an.numel_hint(an.shape(leaf)) * _BROADCAST_RATIO > size)


def rewrite(graph: Graph, an: GraphAnalysis, candidates: list[Candidate],
            pins: dict | None = None) -> tuple[Graph, dict]:
    """`graph` with each candidate's cone copied for its readers; {candidate: copy of its value}.
    `pins`, when given, gets {copied node: (candidate number, its readers)}: fusion merges a group
    of copies only into its readers' kernel (engine `_stray_copies`), never into the kernel the
    value came from, where a copy reading that kernel's other stores would otherwise go first."""
    taken = set(an.nodes) | an.input_names
    inserts: dict[str, list] = {}  # a node name -> the copies that go right before it
    rewired: dict[str, dict[str, str]] = {}  # reader -> {input value: its copy}
    copies = {}
    for k, cand in enumerate(candidates):
        copier = _ConeCopier(an, set(cand.cone), f"_rc{k}", taken, dict(cand.aliases))
        for reader in cand.readers:
            for v in an.nodes[reader].inputs:
                if an.root[v] == cand.value:
                    rewired.setdefault(reader, {})[v] = copier.copy_of(v)
        inserts.setdefault(cand.readers[0], []).extend(copier.made)
        copies[cand] = copier.renamed[cand.value]
        if pins is not None:
            readers = frozenset(cand.readers)
            pins.update((node.name, (k, readers)) for node in copier.made)
    hoisted = _hoisted_stores(an, candidates)
    moved = {name for names in hoisted.values() for name in names}
    nodes = []

    def emit(node) -> None:
        nodes.extend(inserts.get(node.name, ()))
        if node.name in rewired:
            node = replace(node, inputs=tuple(rewired[node.name].get(v, v) for v in node.inputs))
        nodes.append(node)
        for name in hoisted.get(node.name, ()):
            emit(an.nodes[name])

    for node in graph.nodes:
        if node.name not in moved:
            emit(node)
    return replace(graph, nodes=tuple(nodes)), copies


def _hoisted_stores(an: GraphAnalysis, candidates: list[Candidate]) -> dict[str, list[str]]:
    """{member: the stores holding its elements (and their views) moved to right after it}: the
    copies read such a store, which graph order may place after their readers (SD's shortcut
    convolution, and so its input, come after the group norm that reads the cat's cast)."""
    out: dict[str, list[str]] = {}
    seen: set[str] = set()
    for cand in candidates:
        for member, store in cand.aliases:
            chain, x = [], store
            while x != member:
                chain.append(x)
                x = an.nodes[x].inputs[0]
            out.setdefault(member, []).extend(n for n in reversed(chain) if n not in seen)
            seen.update(chain)
    return out


class _ConeCopier:
    """Copies of a cone's nodes under fresh names, made on demand, inputs before readers."""

    def __init__(self, an: GraphAnalysis, cone: set, suffix: str, taken: set, aliases: dict | None = None):
        self.an, self.cone, self.suffix, self.taken = an, cone, suffix, taken
        self.renamed: dict[str, str] = dict(aliases or {})  # a member read from a store holding it
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
