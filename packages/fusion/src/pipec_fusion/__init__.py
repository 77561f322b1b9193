"""pipec_fusion: Graph -> KernelPlan.

Legality (`legality.py`: can two groups be one kernel?) lives apart from
profitability (`Heuristics`: should they?). Any `Heuristics` becomes a fusion
stage with `fusion_from_heuristics`; the presets `none`, `default` and
`aggressive` are such heuristics.
"""

from __future__ import annotations

from pipec_ir import CompileOptions, Graph, KernelPlan

from .engine import fuse_graph
from .heuristics import AggressiveHeuristics, DefaultHeuristics, GroupInfo, Heuristics, NoFusion, PRESETS
from .legality import Group, check_group, check_merge

__version__ = "0.1.0"


class HeuristicFusion:
    """A `pipec_ir.Fusion` stage driven by one `Heuristics`; `name` is the policy's name
    (the heuristics' own `name` unless another was given)."""

    def __init__(self, heuristics: Heuristics, name: str | None = None):
        self.heuristics = heuristics
        self.name = name or heuristics.name

    def fuse(self, graph: Graph, options: CompileOptions) -> KernelPlan:
        # fusion_fuel=N (pipec bisect): only the first N merges; an option, so in the cache key
        return fuse_graph(graph, self.heuristics, policy=self.name, fuel=options.get("fusion_fuel"))

    def __repr__(self) -> str:
        return f"HeuristicFusion({type(self.heuristics).__name__}, name={self.name!r})"


def fusion_from_heuristics(heuristics: Heuristics, name: str | None = None) -> HeuristicFusion:
    """Build a fusion stage (`fuse(graph, options) -> KernelPlan`) from any `Heuristics`.

    The stage is named after `heuristics.name`, so a policy is named once:

        stage = fusion_from_heuristics(MyHeuristics())
        registry.add_fusion(stage.name, stage)

    `name` overrides it (one instance registered under several names, e.g. with a seed).
    """
    return HeuristicFusion(heuristics, name)


def preset(name: str) -> HeuristicFusion:
    """The built-in fusion stage `none`, `default` or `aggressive`."""
    return fusion_from_heuristics(PRESETS[name]())


__all__ = [
    "Heuristics", "GroupInfo", "NoFusion", "DefaultHeuristics", "AggressiveHeuristics", "PRESETS",
    "HeuristicFusion", "fusion_from_heuristics", "fuse_graph", "preset",
    "Group", "check_group", "check_merge",
]
