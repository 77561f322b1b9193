"""Legality: can two groups be one kernel? (Profitability is `heuristics.py`.)

Every check returns None (legal) or a reason string that ends up in the plan's
`rejected` list. Nothing here knows about scores or policies.

The model a kernel is checked against (codegen relies on the same model):
- pointwise kernel, domain D: the point index is R = (i0, i1, ...) over D.
- reduction kernel, domain S, reduce_dims dims: row index R over S; a value of
  shape S-reduced keepdim is at (i_d, or 0 on reduced dims), one of shape
  S-reduced without keepdim at (i_d for kept dims). That is each node's *level*.
- Starting from the stored outputs (at their level index), every in-kernel read
  is mapped through its view chain (`pipec_ir.indexing.view_source_index`) to the
  index it needs in its producer. A node needed only at its own level index is
  *plain*; any other pointwise/creation node is *recomputed* at the indices it is
  needed at (a broadcast or re-indexing producer). A reduction must be read at
  its own row: recomputing a reduction is never legal.
- matmul kernel (an `mm`/`bmm` plus its *epilogue*): the epilogue is checked as a
  pointwise kernel over the product's domain in which the product is a leaf read
  at its own index only (each product element exists where the tile computes it).
  Its operands come from memory: a member feeding the product would be a prologue.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import networkx as nx
import sympy

from pipec_ir.indexing import coarse_index, refine_shapes
from pipec_ir.ops import MATMUL_OPS, REDUCTION_OPS, SCAN_OPS
from pipec_ir.symbolic import bounded_index, index_symbol

from .analysis import GraphAnalysis, index_vars, same_index, same_shape, shape_str
from .scatter_legality import SCATTER, check_scatter_group, scatter_merge
from .scan_rules import scan_group_reason, scan_merge_reason, scan_read_reason

LIBRARY_KINDS = ("matmul", "extern")


@dataclass(frozen=True)
class Group:
    """A set of computing (non-view) graph nodes that would be one kernel."""
    kind: str  # "pointwise" | "reduction" | "matmul" | "extern" | "collective" | "scan" | "scatter"
    members: frozenset
    domain: tuple = ()
    reduce_dims: tuple = ()

    def __post_init__(self) -> None:
        # groups key the merger's caches and are hashed millions of times under horizontal
        # fusion: rehashing the domain's sympy sizes each time was ~40% of a Llama's
        # `aggressive` fusion, so the hash is computed once (the fields never change)
        object.__setattr__(self, "_hash", hash((self.kind, self.members, self.domain, self.reduce_dims)))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True)
class GroupCheck:
    reason: str | None  # None: legal
    recomputed: frozenset = frozenset()  # nodes evaluated at indices other than their level index


def library_reason(an: GraphAnalysis, group: Group) -> str | None:
    if group.kind == "collective":
        (name,) = group.members
        return f"collective {an.nodes[name].op} runs through torch.distributed"
    if group.kind == "matmul":
        return "matmul runs as a library call"
    if group.kind == "extern":
        ext = next(an.nodes[n] for n in group.members if an.nodes[n].op == "extern")
        return f"extern {ext.attr('target')} runs as a library call"
    return None


def merged_group(an: GraphAnalysis, first: Group, second: Group, kind: str) -> tuple[str | None, Group | None]:
    """The group `first` and `second` would form (kind "vertical": first produces for second)."""
    for g in (first, second):  # communication is never fused with anything (docs/IR.md, "Collectives")
        if g.kind == "collective":
            return library_reason(an, g), None
    if SCATTER in (first.kind, second.kind):
        return scatter_merge(an, first, second, kind, Group)
    if "matmul" in (first.kind, second.kind) and "extern" not in (first.kind, second.kind):
        return epilogue_merge(first, second, kind)
    for g in (first, second):
        reason = library_reason(an, g)
        if reason:
            return reason, None
    members = first.members | second.members
    if "scan" in (first.kind, second.kind):
        scan = first if first.kind == "scan" else second
        reason = scan_merge_reason(first, second)
        return (reason, None) if reason else (None, Group("scan", members, scan.domain, scan.reduce_dims))
    if first.kind == "reduction" and second.kind == "reduction":
        if not same_shape(first.domain, second.domain):
            return (f"reductions read different shapes {shape_str(first.domain)} and "
                    f"{shape_str(second.domain)}"), None
        if tuple(first.reduce_dims) != tuple(second.reduce_dims):
            return (f"reduction over different dims {tuple(first.reduce_dims)} and "
                    f"{tuple(second.reduce_dims)}"), None
        return None, Group("reduction", members, first.domain, first.reduce_dims)
    for g in (first, second):
        if g.kind == "reduction":
            return None, Group("reduction", members, g.domain, g.reduce_dims)
    if kind == "horizontal" and not same_shape(first.domain, second.domain):
        return (f"different domains {shape_str(first.domain)} and {shape_str(second.domain)}"), None
    return None, Group("pointwise", members, second.domain)


def epilogue_merge(first: Group, second: Group, kind: str) -> tuple[str | None, Group | None]:
    """A matmul group absorbs pointwise groups over its product's domain: its epilogue.

    Either order: the pointwise group is a consumer of the product, or a producer of
    values only the epilogue reads (`check_group` refuses a member feeding the product)."""
    if first.kind == "matmul" and second.kind == "matmul":
        return "a matmul kernel holds one matmul", None
    if kind != "vertical":
        return "matmul runs as a library call", None
    mm, other = (first, second) if first.kind == "matmul" else (second, first)
    if other.kind != "pointwise":
        return f"a matmul epilogue holds only pointwise ops, not a {other.kind}", None
    if not same_shape(other.domain, mm.domain) and refine_shapes(other.domain, mm.domain) is None:
        return (f"epilogue domain {shape_str(other.domain)} is not the matmul's output "
                f"{shape_str(mm.domain)} nor a contiguous reshape of it"), None
    return None, Group("matmul", first.members | second.members, mm.domain)


def _bounded_vars(shape) -> tuple:
    """Index variables over `shape` that know their static bound (so `(16*j0 + j1) // 16`
    simplifies to j0): `bounded_index`, whose name carries the bound."""
    out = []
    for k, size in enumerate(shape):
        if not sympy.sympify(size).is_Integer:
            out.append(index_symbol(f"j{k}"))
            continue
        out.append(bounded_index(f"j{k}", int(size)))
    return tuple(out)


class _Levels:
    def __init__(self, an: GraphAnalysis, group: Group):
        self.an, self.group = an, group
        self.domain = tuple(group.domain)
        self.row = index_vars(self.domain)
        self.refined = None  # a matmul epilogue over reshapes of the product: its common refinement
        self._levels: dict[str, tuple | None] = {}
        if group.kind == "matmul":
            refined = tuple(s for s in self.domain if s != 1)
            reshaped = False  # a member over another shape than the product's ([1, T, N] of [T, N] too)
            # in graph order: a set's order follows string hashes, and the memo (check_memo.py)
            # gives one group's result to every group of its structure
            for name in sorted(group.members, key=an.pos):
                shape = an.shape(name)
                r = an.refine(refined, shape)
                refined = r if r is not None else refined
                reshaped = reshaped or (r is not None and not same_shape(shape, self.domain))
            if reshaped:
                self.refined = refined
                self.refined_vars = _bounded_vars(refined)
                self.row = coarse_index(self.refined_vars, refined, self.domain)
        dims = set(group.reduce_dims)
        self.keep_shape = tuple(1 if d in dims else s for d, s in enumerate(self.domain))
        self.keep = tuple(sympy.Integer(0) if d in dims else i for d, i in enumerate(self.row))
        self.nokeep_shape = tuple(s for d, s in enumerate(self.domain) if d not in dims)
        self.nokeep = tuple(i for d, i in enumerate(self.row) if d not in dims)

    def level(self, name: str):
        """The index a node is computed at when plain, or None when its shape has no level."""
        if name not in self._levels:  # asked for each stored member, then for every member
            self._levels[name] = self._level(name)
        return self._levels[name]

    def _level(self, name: str):
        node = self.an.nodes[name]
        shape = self.an.shape(name)
        if self.group.kind in ("pointwise", "matmul", "scan"):  # an epilogue runs over the product's domain
            if same_shape(shape, self.domain):
                return self.row
            if self.refined is not None:  # or over a contiguous reshape of it, at the same flat index
                return coarse_index(self.refined_vars, self.refined, shape)
            return None
        if node.op in REDUCTION_OPS:
            return self.keep if node.attr("keepdim") else self.nokeep
        if same_shape(shape, self.domain):
            return self.row
        if same_shape(shape, self.keep_shape):
            return self.keep
        if same_shape(shape, self.nokeep_shape):
            return self.nokeep
        return None



def check_group(an: GraphAnalysis, group: Group) -> GroupCheck:
    """Can `group` be one kernel on its own? (Shapes and indices; cycles are `cycle_through`.)"""
    if group.kind in ("extern", "collective") or (group.kind == "matmul" and len(group.members) == 1):
        return GroupCheck(None)
    if group.kind == SCATTER:
        return GroupCheck(*check_scatter_group(an, group))
    members = group.members
    ordered = sorted(members, key=an.pos)
    lv = _Levels(an, group)
    if group.kind == "matmul":
        reason = _matmul_reason(an, group, ordered)
        if reason:
            return GroupCheck(reason)

    for name in ordered:
        node = an.nodes[name]
        if node.op in REDUCTION_OPS:
            if group.kind != "reduction":
                return GroupCheck(f"{name} is a reduction in a pointwise kernel")
            src = an.shape(node.inputs[0])
            if not same_shape(src, group.domain):
                return GroupCheck(f"reductions read different shapes {shape_str(src)} and {shape_str(group.domain)}")
            if tuple(node.attr("dims")) != tuple(group.reduce_dims):
                return GroupCheck(f"reduction over different dims {tuple(node.attr('dims'))} and "
                                  f"{tuple(group.reduce_dims)}")
    reason = scan_group_reason(an, group, ordered)
    if reason:
        return GroupCheck(reason)

    needed: dict[str, dict[tuple, str]] = defaultdict(dict)  # node -> {index: first reader}
    for name in ordered:
        if an.must_store(name, members):
            level = lv.level(name)
            if level is None:
                shape = shape_str(an.shape(name))
                if group.kind in ("pointwise", "scan"):
                    return GroupCheck(f"{name} would be stored with shape {shape} but the kernel's domain is "
                                      f"{shape_str(group.domain)}")
                return GroupCheck(f"{name} would be stored with shape {shape}, which is neither the reduction's "
                                  f"input shape {shape_str(group.domain)} nor that shape reduced")
            needed[name].setdefault(level, "<store>")

    for name in ordered:
        node = an.nodes[name]
        if node.op == "take" and an.root[node.inputs[0]] in members:
            return GroupCheck(f"{name} reads {an.root[node.inputs[0]]} at data-dependent positions: "
                              "a take's source must come from memory")

    for name in reversed(ordered):
        node = an.nodes[name]
        indices = [lv.row] if node.op in REDUCTION_OPS or node.op in SCAN_OPS else list(needed[name])
        for index in indices:
            for value in node.inputs[1:] if node.op == "take" else node.inputs:
                root, src = an.map_index(value, index)
                if root in members:
                    needed[root].setdefault(src, name)

    recomputed = set()
    for name in ordered:
        level = lv.level(name)
        off = [(i, reader) for i, reader in needed[name].items() if level is None or not same_index(i, level)]
        if not off:
            continue
        if an.nodes[name].op in REDUCTION_OPS:
            index, reader = off[0]
            return GroupCheck(f"{reader} reads reduction {name} at another row than its own "
                              f"(index {_index_str(index)}, row {_index_str(level)})")
        if an.nodes[name].op in SCAN_OPS:
            index, reader = off[0]
            return GroupCheck(scan_read_reason(name, _index_str(index), reader, _index_str(level)))
        if an.nodes[name].op in MATMUL_OPS:
            index, reader = off[0]
            return GroupCheck(f"{reader} reads matmul {name} at another index than its own "
                              f"(index {_index_str(index)}, own {_index_str(level)}): an epilogue reads "
                              "each product element where the tile computes it")
        if not _evaluated_once_per_element(an, lv, name, needed[name]):
            recomputed.add(name)
    return GroupCheck(None, frozenset(recomputed))


def _matmul_reason(an: GraphAnalysis, group: Group, ordered: list[str]) -> str | None:
    """A matmul kernel: exactly one mm/bmm, no reduction, and no member feeding the product."""
    mms = [n for n in ordered if an.nodes[n].op in MATMUL_OPS]
    if len(mms) != 1:
        return f"a matmul kernel holds one matmul, not {len(mms)} ({', '.join(mms)})"
    (mm,) = mms
    for name in ordered:
        if an.nodes[name].op in REDUCTION_OPS:
            return f"a matmul epilogue holds only pointwise ops; {name} is a reduction"
    operands = {an.root[v] for v in an.nodes[mm].inputs}
    for name in ordered:
        if name in operands:
            return f"{name} is an operand of matmul {mm}: a matmul kernel fuses only its epilogue"
    return None


def _evaluated_once_per_element(an: GraphAnalysis, lv: _Levels, name: str, needed: dict) -> bool:
    """True when `name` is read at a single index that visits each of its elements at most once.

    A reshape or permute between producer and consumer re-indexes without repeating
    work; a broadcast (the consumer runs over more points than the producer has
    elements) or reads at several indices repeat it.
    """
    if len(needed) != 1:
        return False
    (index,) = needed
    used = an.index_symbols(index)
    # the points it is evaluated at: every kept dim (once per row), reduced dims only if it varies along them
    reduced = set(lv.group.reduce_dims)
    points = [s for d, s in enumerate(lv.domain) if d not in reduced or lv.row[d] in used]
    return an.numel_hint(an.shape(name)) >= an.numel_hint(tuple(points))


def _index_str(index) -> str:
    return "(" + ", ".join(str(i) for i in index) + ")"


def cycle_through(dag: nx.DiGraph, a, b):
    """A group on a path between groups a and b (merging them would make a cycle), or None."""
    between = (nx.descendants(dag, a) & nx.ancestors(dag, b)) | (nx.descendants(dag, b) & nx.ancestors(dag, a))
    between -= {a, b}
    return min(between) if between else None


def check_merge(an: GraphAnalysis, dag: nx.DiGraph | None, ids: tuple, first: Group, second: Group,
                kind: str) -> str | None:
    """Convenience: the first reason merging `first` and `second` is illegal, or None.

    `dag` is the current group DAG whose nodes are group ids; `ids` the ids of first and second.
    """
    reason, merged = merged_group(an, first, second, kind)
    if reason:
        return reason
    result = check_group(an, merged)
    if result.reason:
        return result.reason
    if dag is not None:
        through = cycle_through(dag, *ids)
        if through is not None:
            return f"would create a cycle through group {through}"
    return None
