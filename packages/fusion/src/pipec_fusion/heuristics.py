"""Profitability: should two legal groups be one kernel? (Legality is `legality.py`.)

A `Heuristics` sees only `GroupInfo`s — small frozen descriptions of the two
groups — and the kind of merge:

- "vertical": `first` produces values `second` reads, every node still computed once
  per point of its own level (pointwise chains, prologue into / epilogue after a
  reduction, reductions sharing their input shape and dims).
- "recompute": vertical, but some producer value is evaluated at other indices than
  its own (broadcast into a larger consumer domain, or read through a permute/slice):
  codegen recomputes it per consumer element.
- "horizontal": independent groups (no path between them) with the same domain.

`score` returns a float (higher merges first) or None for "do not fuse";
`why_not` words the rejection recorded in the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

CREATION_OPS = frozenset({"full", "iota"})


@dataclass(frozen=True)
class GroupInfo:
    kind: str  # "pointwise" | "reduction" | "matmul" | "extern"
    nodes: tuple[str, ...]  # computing (non-view) nodes, topological order
    ops: tuple[str, ...]  # their ops, same order
    domain: tuple  # sympy expressions
    reduce_dims: tuple[int, ...]
    numel: int  # size of the domain with symbol hints substituted


class Heuristics:
    """Base class: override `score` (and `why_not` for readable rejections)."""

    name = "custom"
    horizontal = False  # propose horizontal candidates at all (they are O(groups^2))

    def score(self, first: GroupInfo, second: GroupInfo, kind: str) -> float | None:
        return None

    def why_not(self, first: GroupInfo, second: GroupInfo, kind: str) -> str:
        return f"heuristics: policy {self.name!r} does not fuse this {kind} pair"


class NoFusion(Heuristics):
    """Every computing node is its own kernel."""

    name = "none"

    def score(self, first, second, kind):
        return None

    def why_not(self, first, second, kind):
        return "heuristics: policy 'none' does not fuse"


class DefaultHeuristics(Heuristics):
    """Vertical producer -> consumer fusion; no recomputation except of literals."""

    name = "default"
    max_ops = 64

    def _too_big(self, first, second) -> bool:
        return len(first.nodes) + len(second.nodes) > self.max_ops

    def score(self, first, second, kind):
        if self._too_big(first, second):
            return None
        if kind == "vertical":
            return 1.0 + float(first.numel)  # the intermediate is neither written nor read back
        if kind == "recompute" and all(op in CREATION_OPS for op in first.ops):
            return 1.0  # a literal or iota costs nothing to recompute
        return None

    def why_not(self, first, second, kind):
        if self._too_big(first, second):
            return f"heuristics: kernel would hold more than {self.max_ops} ops"
        if kind == "recompute":
            return (f"heuristics: policy {self.name!r} does not recompute {first.nodes[-1]} per element of "
                    f"{second.nodes[0]}'s domain (policy 'aggressive' does)")
        if kind == "horizontal":
            return f"heuristics: policy {self.name!r} does not fuse independent kernels"
        return super().why_not(first, second, kind)


class AggressiveHeuristics(DefaultHeuristics):
    """Default, plus recomputation by broadcast and horizontal fusion of same-domain groups."""

    name = "aggressive"
    horizontal = True
    max_ops = 128

    def score(self, first, second, kind):
        if self._too_big(first, second):
            return None
        if kind == "vertical":
            return 1.0 + float(first.numel)
        if kind == "recompute":
            return 0.75  # after every plain vertical fusion
        if kind == "horizontal":
            return 0.5  # last: one launch instead of two
        return None


PRESETS: dict[str, type[Heuristics]] = {
    "none": NoFusion,
    "default": DefaultHeuristics,
    "aggressive": AggressiveHeuristics,
}
