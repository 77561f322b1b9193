"""The fusion engine: Graph -> KernelPlan, greedy over legal, profitable merges.

    fuse_graph(graph, heuristics)
      = split_column_sums      large column sums as partial sums + a sum of the partials
      -> split_row_reductions  long sums over few rows as partials per block + their combine
      -> analyse_graph         views transparent, roots, readers, forced stores
      -> initial_groups        one group per computing node (an extern with its getitems)
      -> merge_greedily        best-scoring legal candidate first, until none is left
      -> build_plan            kernels, their order and names, verified (plan_builder.py)
      -> recompute_stored      cheap stored values copied into the kernels reading them, fused again

`fuel=N` (the option `fusion_fuel`, used by `pipec bisect`) makes only the first N merges of
the greedy order and skips recompute_stored, as Inductor's bisector rations its passes: the
first N decisions are those of the unrationed run, so N and N-1 differ by one merge.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from dataclasses import dataclass

import networkx as nx
from pipec_ir import Graph, KernelPlan, verify
from pipec_ir.verify import is_multi_result

from .analysis import GraphAnalysis, changed_nodes, group_kind_of
from .check_memo import CheckMemo
from .common_values import merge_common_values
from .heuristics import GroupInfo, Heuristics
from .legality import Group, GroupCheck, check_group, merged_group
from .plan_builder import build_plan
from .reachability import Reachability
from .recompute_stored import find_candidates, landed, rewrite
from .scan_rules import scan_domain
from .scatter_legality import SCATTER
from .split_reductions import split_column_sums
from .split_rows import split_row_reductions


_MISSING = object()  # not in a cache (a score may be None: "do not fuse")

# Off: every pass of fuse_graph checks and scores its groups itself (tests compare the plans).
REUSE_EARLIER_PASS = True


@dataclass(frozen=True)
class _Candidate:
    a: int  # group ids (vertical: a produces for b)
    b: int
    kind: str  # "vertical" | "horizontal"
    first: str  # the node of each group the rejection names
    second: str


class _State:
    def __init__(self, an: GraphAnalysis, memo: CheckMemo | None = None, earlier: _State | None = None,
                 pins: dict | None = None):
        self.an = an
        self.memo = memo  # legality results of earlier passes (check_memo.py)
        # the previous pass of this fuse_graph call: what it found about a group none of whose
        # members the recompute rewrite changed holds here too (`reusable`)
        self.earlier = earlier
        self.pins = pins or {}  # recompute copies -> (candidate number, readers): `_stray_copies`
        self.changed = changed_nodes(earlier.an, an) if earlier is not None else None
        self._unchanged: dict[Group, bool] = {}
        self._first: dict[Group, int] = {}
        self._member_keys: dict = {}
        self.groups: dict[int, Group] = {}
        self.owner: dict[str, int] = {}
        for name in an.compute:
            node = an.nodes[name]
            kind = group_kind_of(node)
            if node.op == "getitem":
                gid = self.owner[node.inputs[0]]
                g = self.groups[gid]
                self.groups[gid] = Group(g.kind, g.members | {name}, g.domain)
                self.owner[name] = gid
                continue
            gid = an.pos(name)
            if kind == "reduction":
                group = Group(kind, frozenset({name}), an.shape(node.inputs[0]), tuple(node.attr("dims")))
            elif kind == "scan":
                group = Group(kind, frozenset({name}), *scan_domain(an, name))
            elif kind == "scatter":  # one program instance per written element: the index's shape
                group = Group(kind, frozenset({name}), an.shape(node.inputs[1]))
            elif is_multi_result(node):
                group = Group(kind, frozenset({name}), ())
            else:
                group = Group(kind, frozenset({name}), an.shape(name))
            self.groups[gid] = group
            self.owner[name] = gid
        self.dag = nx.DiGraph()
        self.dag.add_nodes_from(self.groups)
        for name in an.compute:
            for value in an.nodes[name].inputs:
                root = an.source[value]
                if root in self.owner and self.owner[root] != self.owner[name]:
                    self._add_edge(self.owner[root], self.owner[name], (root, name))
        for earlier, later in an.seeded_order():  # no merge may put a draw before an earlier one
            self._add_edge(self.owner[earlier], self.owner[later], (earlier, later))
        self._checks: dict[Group, GroupCheck] = {}
        self._infos: dict[Group, GroupInfo] = {}
        self.statics: dict = {}
        self.scores: dict = {}

    def _add_edge(self, a, b, pair):
        data = self.dag.succ[a].get(b)
        if data is not None:
            data["pairs"].append(pair)
        else:
            self.dag.add_edge(a, b, pairs=[pair])

    def reusable(self, *groups: Group) -> bool:
        """Did the previous pass see these groups with every member's facts as they are here?
        Its legality, GroupInfos and scores for them are then this pass's: the recompute pass
        (recompute_stored.py) changes a few nodes and, checking and scoring everything again, cost
        as much as the first pass. (Scatter groups are checked every time, as in check_memo.py.)"""
        if self.changed is None:
            return False
        for g in groups:
            found = self._unchanged.get(g)
            if found is None:
                found = self._unchanged[g] = g.kind != SCATTER and g.members.isdisjoint(self.changed)
            if not found:
                return False
        return True

    def check(self, group: Group) -> GroupCheck:
        found = self._checks.get(group)
        if found is None:
            found = self.earlier._checks.get(group) if self.reusable(group) else None
            if found is None:
                found = (self.memo.check(self.an, group, self._member_keys) if self.memo is not None
                         else check_group(self.an, group))
            self._checks[group] = found
        return found

    def first_position(self, group: Group) -> int:
        """The graph position of the group's first member (once per group version)."""
        found = self._first.get(group)
        if found is None:
            found = self._first[group] = min(self.an.pos(n) for n in group.members)
        return found

    def info(self, group: Group) -> GroupInfo:
        found = self._infos.get(group)
        if found is None:
            found = self.earlier._infos.get(group) if self.reusable(group) else None
            if found is None:
                nodes = tuple(sorted(group.members, key=self.an.pos))
                found = GroupInfo(
                    kind=group.kind, nodes=nodes, ops=tuple(self.an.nodes[n].op for n in nodes),
                    domain=tuple(group.domain), reduce_dims=tuple(group.reduce_dims),
                    numel=self.an.numel_hint(group.domain))
            self._infos[group] = found
        return found

    def earlier_entry(self, table: str, key: tuple, ga: Group, gb: Group):
        """`key`'s entry in the previous pass's `table` ("statics" or "scores") when the pair is
        reusable, copied into this pass's; else _MISSING."""
        if not self.reusable(ga, gb):
            return _MISSING
        found = getattr(self.earlier, table).get(key, _MISSING)
        if found is not _MISSING:
            getattr(self, table)[key] = found
        return found

    def merge(self, a: int, b: int, merged: Group) -> int:
        keep, gone = min(a, b), max(a, b)
        for n in merged.members:
            self.owner[n] = keep
        self.groups[keep] = merged
        del self.groups[gone]
        # the adjacency dicts, not in_edges/out_edges: networkx's edge views cost more than the
        # few edges they hold
        for p, data in list(self.dag.pred[gone].items()):
            if p != keep:
                for pair in data["pairs"]:
                    self._add_edge(p, keep, pair)
        for s, data in list(self.dag.succ[gone].items()):
            if s != keep:
                for pair in data["pairs"]:
                    self._add_edge(keep, s, pair)
        self.dag.remove_node(gone)
        return keep


def fuse_graph(graph: Graph, heuristics: Heuristics, policy: str | None = None,
               fuel: int | None = None) -> KernelPlan:
    """Partition `graph` into kernels, fusing what legality allows and `heuristics` wants, after
    dropping nodes that repeat earlier ones (common_values.py) and splitting large column sums
    and long sums over few rows in two (split_reductions.py, split_rows.py); then recompute cheap stored values
    where they are read (recompute_stored.py). `fuel`: make at most that many merges, and no
    recomputing (a rationed run, for bisecting)."""
    if fuel is not None and (isinstance(fuel, bool) or not isinstance(fuel, int) or fuel < 0):
        raise ValueError(f"fusion_fuel must be an integer >= 0, got {fuel!r}")
    verify(graph)
    if (policy or heuristics.name) != "none":  # `none`: one kernel per op, as captured
        graph, _ = merge_common_values(graph)
        graph = split_row_reductions(split_column_sums(graph))
    memo = CheckMemo()
    first = _fuse_once(graph, heuristics, fuel, memo)
    if fuel is not None:
        return _plan_of(first, policy or heuristics.name)
    state = first.state
    candidates = find_candidates(state.an, state.groups, state.owner, heuristics)
    previous = first
    while candidates:
        pins: dict = {}
        rewritten, copies = rewrite(graph, state.an, candidates, pins)
        previous = _fuse_once(rewritten, heuristics, memo=memo, earlier=previous.state, pins=pins)
        kept = [c for c in candidates if landed(previous.state.owner, c, copies[c])]
        if len(kept) == len(candidates):
            return _plan_of(previous, policy or heuristics.name)
        candidates = kept
    return _plan_of(first, policy or heuristics.name)


@dataclass
class _Pass:
    """One pass of fusion over `graph`: its groups and merges. Its KernelPlan is built only for
    the pass fuse_graph returns: building and verifying the plans of passes the recompute pass
    replaced took 0.05 s of BERT base's backward fusion (0.7 s)."""
    state: _State
    graph: Graph
    fusions: list[tuple]
    rejected: list[tuple]


def _fuse_once(graph: Graph, heuristics: Heuristics, fuel: int | None = None, memo: CheckMemo | None = None,
               earlier: _State | None = None, pins: dict | None = None) -> _Pass:
    an = GraphAnalysis(graph)
    state = _State(an, memo, earlier if REUSE_EARLIER_PASS else None, pins)
    fusions, rejected = merge_greedily(state, heuristics, fuel)
    return _Pass(state, graph, fusions, rejected)


def _plan_of(one: _Pass, policy: str) -> KernelPlan:
    return build_plan(one.state.an, one.state.groups, one.graph, policy, one.fusions, one.rejected)


# ---------------------------------------------------------------- greedy merging


# Horizontal candidates pair each group only with the HORIZONTAL_WINDOW nearest groups of its
# bucket (kind, domain, reduced dims) in graph order, as Inductor tries a bounded number of pairs:
# offering every unrelated pair made `aggressive` fusion quadratic in a model's layers (a
# 16-layer Llama's weight casts and rotary tables: 1.8 million candidates, 118 s on a CPU).
HORIZONTAL_WINDOW = 32


class HorizontalBuckets:
    """The pointwise and reduction groups by bucket, each bucket kept in graph order (a group's
    first member's position, then its id) through merges."""

    def __init__(self, state: _State, scalars_only: bool = False):
        self.state = state
        self.scalars_only = scalars_only  # only groups of a 0-d domain (`Heuristics.horizontal_scalars`)
        self.lists: dict[tuple, list[tuple[int, int]]] = {}  # bucket -> sorted (position, group id)
        for gid, grp in state.groups.items():
            self.add(gid, grp)

    def key(self, group: Group) -> tuple | None:
        if group.kind not in ("pointwise", "reduction") or (self.scalars_only and tuple(group.domain)):
            return None
        return (group.kind, tuple(group.domain), tuple(group.reduce_dims))

    def add(self, gid: int, group: Group) -> None:
        key = self.key(group)
        if key is not None:
            bisect.insort(self.lists.setdefault(key, []), (self.state.first_position(group), gid))

    def remove(self, gid: int, group: Group) -> None:
        key = self.key(group)
        if key is not None:
            entries = self.lists[key]
            at = bisect.bisect_left(entries, (self.state.first_position(group), gid))
            if at < len(entries) and entries[at][1] == gid:
                del entries[at]

    def ordered(self, key: tuple) -> list[int]:
        return [gid for _, gid in self.lists.get(key, ())]

    def pairs(self, reach: Reachability, only: int | None = None):
        """(a, b) with a < b: unrelated groups of one bucket within the window of each other (with
        `only`: the pairs holding that group)."""
        if only is not None:
            group = self.state.groups[only]
            key = self.key(group)
            if key is None:
                return
            entries = self.lists[key]
            k = bisect.bisect_left(entries, (self.state.first_position(group), only))
            near = entries[max(0, k - HORIZONTAL_WINDOW):k] + entries[k + 1:k + 1 + HORIZONTAL_WINDOW]
            for _, other in near:
                a, b = min(only, other), max(only, other)
                if not reach.related(a, b):
                    yield a, b
            return
        for key in sorted(self.lists, key=repr):
            ids = self.ordered(key)
            for k in range(len(ids)):
                for other in ids[k + 1:k + 1 + HORIZONTAL_WINDOW]:
                    a, b = min(ids[k], other), max(ids[k], other)
                    if not reach.related(a, b):
                        yield a, b


def _candidates(state: _State, reach: Reachability, buckets: HorizontalBuckets | None) -> list[_Candidate]:
    """The candidates of the final round (`reach` and `buckets`: the merger's, kept up to date)."""
    an, out = state.an, []
    for a, b, data in state.dag.edges(data=True):
        first, second = min(data["pairs"], key=lambda p: (an.pos(p[1]), an.pos(p[0])))
        out.append(_Candidate(a, b, "vertical", first, second))
    if buckets is not None:
        for a, b in buckets.pairs(reach):
            first = min(state.groups[a].members, key=an.pos)
            second = min(state.groups[b].members, key=an.pos)
            out.append(_Candidate(a, b, "horizontal", first, second))
    out.sort(key=lambda c: (an.pos(c.second), an.pos(c.first), c.kind))
    return out


def _static(state: _State, ga: Group, gb: Group, kind: str):
    """(reason, merged group, heuristics kind) for merging ga and gb, ignoring cycles (cached)."""
    key = (ga, gb, kind)
    found = state.statics.get(key, _MISSING)
    if found is _MISSING:
        found = state.earlier_entry("statics", key, ga, gb)
        if found is _MISSING:
            found = state.statics[key] = _static_uncached(state, ga, gb, kind)
    return found


def _static_uncached(state: _State, ga: Group, gb: Group, cand_kind: str):
    reason, merged = merged_group(state.an, ga, gb, cand_kind)
    if reason:
        return reason, None, None
    if cand_kind == "horizontal":
        # no value flows between the two: each stores what it stored, reads what it read
        for g in (ga, gb):
            if state.check(g).reason:
                return state.check(g).reason, None, None
        return None, merged, "horizontal"  # (a pair with a path between is refused when popped)
    result = state.check(merged)
    if result.reason:
        return result.reason, None, None
    fresh = result.recomputed - state.check(ga).recomputed - state.check(gb).recomputed
    kind = "recompute" if cand_kind == "vertical" and fresh else cand_kind
    return None, merged, kind


def _score(state: _State, heuristics: Heuristics, ga: Group, gb: Group, hkind: str):
    if state.pins and (_stray_copies(state.pins, ga, gb) or _stray_copies(state.pins, gb, ga)):
        return None
    key = (ga, gb, hkind)
    found = state.scores.get(key, _MISSING)  # one lookup: asked ~100k times under `aggressive`
    if found is _MISSING:
        found = state.earlier_entry("scores", key, ga, gb)
        if found is _MISSING:
            found = state.scores[key] = heuristics.score(state.info(ga), state.info(gb), hkind)
    return found


def _stray_copies(pins: dict, group: Group, other: Group) -> bool:
    """Is `group` only copies of recompute candidates (recompute_stored.rewrite's `pins`) and
    `other` neither a kernel reading them nor copies of the same candidates? Such a merge would put
    the copies where no reader is, and the rewrite would be undone."""
    numbers, readers = set(), set()
    for m in group.members:
        pin = pins.get(m)
        if pin is None:
            return False
        numbers.add(pin[0])
        readers |= pin[1]
    if not readers.isdisjoint(other.members):
        return False
    return not any(pins.get(m, (None,))[0] in numbers for m in other.members)


def _has_detour(dag: nx.DiGraph, reach: Reachability, a: int, b: int) -> bool:
    """Is there a path a -> X -> ... -> b through another group X?"""
    return any(s != b and reach.reaches(s, b) for s in dag.successors(a))


def merge_greedily(state: _State, heuristics: Heuristics, fuel: int | None = None):
    """Repeatedly merge the best-scoring legal candidate pair until none is left (or `fuel`
    merges are made).

    A candidate is a pair of *group versions*; merging only ever adds paths between
    the remaining groups, so a pair found illegal stays illegal until one of its
    groups changes (and then it is a new candidate). Hence a heap, evaluated lazily.

    Legality is checked only when a candidate reaches the top of the heap: most candidates
    go stale first (a neighbour merges), and checking them all was most of fusion's time
    (BERT base: ~7,900 checks for ~1,200 merges). A candidate enters with the best score its
    legal kinds could have (a vertical pair may turn out "recompute"); popped, it is checked,
    and goes back in with its real score when that is lower, so the merge order is the one
    checking everything first would give.
    """
    an = state.an
    heap: list = []
    counter = itertools.count()
    fusions: list[tuple] = []

    def push(score, a: int, b: int, ga: Group, gb: Group, kind: str, merged) -> None:
        order = (state.first_position(gb), state.first_position(ga), kind)
        heapq.heappush(heap, (-float(score), order, next(counter), a, b, ga, gb, kind, merged))

    def consider(a: int, b: int, kind: str) -> None:
        ga, gb = state.groups[a], state.groups[b]
        kinds = ("vertical", "recompute") if kind == "vertical" else (kind,)
        scores = [s for s in (_score(state, heuristics, ga, gb, k) for k in kinds) if s is not None]
        if scores:
            push(max(scores), a, b, ga, gb, kind, None)  # merged None: not checked yet

    for a, b in list(state.dag.edges):
        consider(a, b, "vertical")
    reach = Reachability(state.dag)  # kept up to date through every merge below
    buckets = None
    if heuristics.horizontal or getattr(heuristics, "horizontal_scalars", False):
        buckets = HorizontalBuckets(state, scalars_only=not heuristics.horizontal)
    if buckets is not None:
        for a, b in buckets.pairs(reach):
            consider(a, b, "horizontal")

    while heap and (fuel is None or len(fusions) < fuel):
        neg_score, _, _, a, b, ga, gb, kind, merged = heapq.heappop(heap)
        if state.groups.get(a) is not ga or state.groups.get(b) is not gb:
            continue  # stale: one of the groups changed since
        if merged is None:  # not checked yet: its legality, then its real score
            reason, merged, hkind = _static(state, ga, gb, kind)
            if reason is not None:
                continue
            score = _score(state, heuristics, ga, gb, hkind)
            if score is None:
                continue
            if -float(score) != neg_score:  # lower than it entered with: back in its place
                push(score, a, b, ga, gb, kind, merged)
                continue
        if kind == "vertical" and _has_detour(state.dag, reach, a, b):
            continue
        if kind == "horizontal" and reach.related(a, b):
            continue
        first = tuple(sorted(ga.members, key=an.pos))
        second = tuple(sorted(gb.members, key=an.pos))
        fusions.append((first, second, kind, -neg_score))
        if buckets is not None:
            buckets.remove(a, ga)
            buckets.remove(b, gb)
        keep = state.merge(a, b, merged)
        reach.merge(a, b, keep)
        for p in list(state.dag.predecessors(keep)):
            consider(p, keep, "vertical")
        for s in list(state.dag.successors(keep)):
            consider(keep, s, "vertical")
        if buckets is not None:
            buckets.add(keep, state.groups[keep])
            for x, y in buckets.pairs(reach, only=keep):
                consider(x, y, "horizontal")

    evaluated = []
    for cand in _candidates(state, reach, buckets):
        ga, gb = state.groups[cand.a], state.groups[cand.b]
        reason, merged, hkind = _static(state, ga, gb, cand.kind)
        evaluated.append((cand, reason, merged, hkind))
    rationed = fuel is not None and len(fusions) >= fuel
    return fusions, _rejections(state, heuristics, reach, evaluated, fuel if rationed else None)


def _rejections(state: _State, heuristics: Heuristics, reach: Reachability, evaluated,
                fuel: int | None = None) -> list[tuple]:
    """Every candidate of the final round, with why it was not merged (legality first; `fuel`:
    the rationed merges were used up, which is why a wanted pair was left)."""
    out = []
    for cand, reason, _merged, hkind in evaluated:
        through = None
        if reason is None and cand.kind == "vertical":
            through = reach.between(cand.a, cand.b)  # legality.cycle_through, from the bitsets
        if reason is None and through is None:
            ga, gb = state.groups[cand.a], state.groups[cand.b]
            if fuel is not None and _score(state, heuristics, ga, gb, hkind) is not None:
                reason = f"fusion_fuel={fuel}: the {fuel} merges allowed were made"
            else:
                reason = heuristics.why_not(state.info(ga), state.info(gb), hkind)
        out.append((cand.first, cand.second, reason, through))
    return out
