"""What the pipeline tells of each graph it compiled (GraphStats) and of one compile (Session):
op, kernel and fusion counts, fallbacks, each kernel and how it runs, cache hits, the
compile-time profile. `pipec explain`, `report` and `bench` read them."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pipec_ir
from pipec_ir import CompileProfile, LoadContext

from .errors import PipecFallbackWarning

STAGE_ORDER = ("capture", "fusion", "codegen", "runtime")  # pipeline.PIPELINE's names (a test checks)
CACHED_STEPS = ("aot_autograd", *STAGE_ORDER)  # what a graph can be served from a cache for (GraphStats.cache)

COMPUTE_KINDS = ("pointwise", "reduction", "scan", "matmul", "indexing", "extern", "collective")


def is_compute(node: pipec_ir.Node) -> bool:
    """An op that does work (views are index arithmetic, `full` is a literal, getitem picks a result)."""
    return node.op != "getitem" and pipec_ir.OPS.get(node.op) is not None and \
        pipec_ir.kind_of(node.op) in COMPUTE_KINDS


def _row_held(kernel: pipec_ir.TritonKernel) -> bool | None:
    """A reduction kernel's row: held whole by every config (True), looped in blocks (False);
    None for a kernel without rows. Read from the configs (RBLOCK against rnumel), which the IR
    carries for any code generator; a loop forced over a short row is one block, so "held"."""
    sizes = dict(kernel.sizes)
    if "rnumel" not in sizes:
        return None
    rnumel = sizes["rnumel"]
    blocks = [dict(c.constants).get("RBLOCK") for c in kernel.configs]
    return bool(getattr(rnumel, "is_Integer", False)) and all(b is not None and b >= int(rnumel) for b in blocks)


def plan_units(plan: pipec_ir.KernelPlan) -> list[dict]:
    """The fusion stage's kernels: name, kind, iteration shape and the compute ops each holds."""
    nodes = plan.graph.node_map()
    return [{"name": k.name, "kind": k.kind, "shape": [str(d) for d in k.domain],
             "ops": [nodes[n].op for n in k.nodes if n in nodes and is_compute(nodes[n])],
             "outputs": list(k.outputs)} for k in plan.kernels]


def kernel_rows(units: list[dict] | None, program: pipec_ir.Program) -> list[dict]:
    """`units` (plan_units; one per Triton kernel when the plan is not known) with how each runs,
    for `pipec explain`: a choice group's alternatives, a Triton kernel (a reduction's row held
    in registers or looped), or a library call. Views without a kernel are left out."""
    triton = {k.name: k for k in program.kernels}
    alternatives: dict[str, list[str]] = {}
    launched_by: dict[str, str] = {}  # value -> the Triton kernel whose launch writes it
    sibling_of: dict[str, str] = {}  # a kernel launched in a choice group named after another (codegen's sibling GEMMs)
    for step in program.steps:
        if step.kind == "launch":
            launched_by.update((o, step.target) for o in step.outputs)
        group = pipec_ir.get_attr(step.attrs, "choice")
        name = pipec_ir.get_attr(step.attrs, "alternative")
        if group is not None and name is not None and name not in alternatives.setdefault(group, []):
            alternatives[group].append(name)
        if group is not None and name == "template" and step.target != group:
            sibling_of[step.target] = group
    if units is None:
        units = [{"name": k.name, "kind": "", "shape": [], "ops": []} for k in program.kernels]
    rows = []
    for unit in units:
        name = unit["name"]
        if name in alternatives:
            runs = "the fastest of " + ", ".join(alternatives[name])
        elif name in sibling_of:
            runs = f"in {sibling_of[name]}'s group: the fastest of " + ", ".join(alternatives[sibling_of[name]])
        elif name in triton:
            held = _row_held(triton[name])
            runs = "Triton" + {True: ", row held in registers", False: ", row looped", None: ""}[held]
        elif unit["kind"] == "view":
            continue  # index arithmetic on its consumers' loads: not a kernel
        elif unit.get("outputs") and unit["outputs"][0] in launched_by:
            # launched with others as one kernel (codegen's combo kernels)
            runs = f"Triton, in {launched_by[unit['outputs'][0]]}"
        else:
            runs = "a library call"
        rows.append({**unit, "runs_as": runs})
    return rows


@dataclass
class GraphStats:
    name: str
    kind: str = "inference"  # AOTAutograd's graph kind: "inference", "forward" or "backward"
    op_count: int = 0
    kernel_count: int = 0  # generated Triton kernels
    fusion_count: int = 0  # kernels holding more than one compute op
    extern_ops: list[tuple[str, str]] = field(default_factory=list)  # (ATen overload, reason)
    not_fused: list[tuple[str, str, str]] = field(default_factory=list)  # (first, second, reason)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    kernels: list[tuple[str, str]] = field(default_factory=list)  # (kernel name, Triton source)
    kernel_rows: list[dict] = field(default_factory=list)  # kernel_rows(): each kernel and how it runs
    # CACHED_STEPS -> "hit" | "miss" where looked up; "aot_autograd" may also be "bypass" (torch passed it over)
    cache: dict[str, str] = field(default_factory=dict)
    units: list[dict] | None = field(default=None, repr=False)  # plan_units(), once the plan is made
    # the documents themselves, for `pipec report` (its fusion picture, launch configs)
    plan: pipec_ir.KernelPlan | None = field(default=None, repr=False, compare=False)
    program: pipec_ir.Program | None = field(default=None, repr=False, compare=False)
    # the Program's JSON, kept where the Session asks (`keep_programs`: for AOTAutograd's cache)
    program_text: str | None = field(default=None, repr=False, compare=False)
    # a document served from the compile cache, parsed at the first read of what it tells
    # (`defer`): a warm compile whose every stage hits parses only the Program
    _pending: Callable[[], Any] | None = field(default=None, repr=False, compare=False)
    # the compile cache's key of this graph's KernelPlan, where it was stored; a graph AOTAutograd's
    # cache serves whole reads its plan from there at the first read of `plan` (`_plan_loader`)
    plan_key: str | None = field(default=None, repr=False, compare=False)
    _plan_loader: Callable[[], Any] | None = field(default=None, repr=False, compare=False)

    _FROM_DOCUMENTS = frozenset({"op_count", "extern_ops", "units", "plan", "fusion_count", "not_fused",
                                 "kernel_rows"})

    def __getattribute__(self, name: str):
        if name in GraphStats._FROM_DOCUMENTS and object.__getattribute__(self, "_pending") is not None:
            object.__getattribute__(self, "_settle")()
        if name == "plan" and object.__getattribute__(self, "_plan_loader") is not None:
            object.__getattribute__(self, "_load_plan")()
        return object.__getattribute__(self, name)

    def _load_plan(self) -> None:
        """The plan of a graph served whole from AOTAutograd's cache, read from the compile cache;
        None (with a warning) where that entry is gone. The counts stay the entry's own."""
        load, self._plan_loader = self._plan_loader, None
        try:
            plan = load()
        except Exception as exc:  # noqa: BLE001 - statistics never fail a program
            warnings.warn(f"pipec: graph {self.name}: its plan could not be read from the compile cache "
                          f"({type(exc).__name__}: {exc})", stacklevel=3)
            return
        if isinstance(plan, pipec_ir.KernelPlan):
            self.plan = plan
        else:
            warnings.warn(f"pipec: graph {self.name} was loaded from AOTAutograd's cache and its plan is no "
                          "longer in the compile cache: `plan` is None (`pipec explain` makes it again)",
                          stacklevel=3)

    def defer(self, parse: Callable[[], Any]) -> None:
        self._pending = parse

    def _settle(self) -> None:
        """Parse the deferred document into the counts. Counts never fail a compile: a document
        that does not parse (the cache deleted and named it) leaves the counts it would have
        given empty, and each program kernel is still listed (kernel_rows without the plan)."""
        parse, self._pending = self._pending, None
        try:
            doc = parse()
        except Exception as exc:  # noqa: BLE001 - see the docstring
            doc = None
            warnings.warn(f"pipec: graph {self.name}: its cached plan could not be read for statistics "
                          f"({type(exc).__name__}: {exc})", stacklevel=3)
        if doc is not None:
            add_stats(self, doc)
        if self.program is not None:
            self.kernel_rows = kernel_rows(self.units, self.program)

    def add_graph(self, graph: pipec_ir.Graph) -> None:
        self.op_count = sum(1 for n in graph.nodes if is_compute(n))
        self.extern_ops = [(str(n.attr("target")), str(n.attr("reason", ""))) for n in graph.nodes
                           if n.op == "extern"]

    def add_plan(self, plan: pipec_ir.KernelPlan) -> None:
        self.units = plan_units(plan)
        self.plan = plan
        self.fusion_count = sum(1 for unit in self.units if len(unit["ops"]) > 1)
        self.not_fused = [(r.first, r.second, r.reason) for r in plan.rejected]

    def add_program(self, program: pipec_ir.Program) -> None:
        # not counted: kernels only a non-default alternative of a choice group launches (docs/IR.md)
        other = {s.target for s in program.steps if pipec_ir.get_attr(s.attrs, "choice") is not None
                 and not pipec_ir.get_attr(s.attrs, "default")}
        self.kernel_count = len([k for k in program.kernels if k.name not in other])
        self.kernels = [(k.name, k.source) for k in program.kernels]
        self.program = program
        if self._pending is None:  # else _settle makes them, with the plan's units
            self.kernel_rows = kernel_rows(self.units, program)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "kind": self.kind, "op_count": self.op_count, "kernel_count": self.kernel_count,
            "fusion_count": self.fusion_count,
            "extern_ops": [{"target": t, "reason": r} for t, r in self.extern_ops],
            "not_fused": [{"first": a, "second": b, "reason": r} for a, b, r in self.not_fused],
            "stage_seconds": dict(self.stage_seconds), "cache": dict(self.cache),
            "kernels": list(self.kernel_rows),
        }


@dataclass
class Session:
    """What one pipec.compile (or one CLI run) saw: every graph compiled, stage by stage.

    `on_stage(stage, impl_name, graph_name, event)` is called with event
    "start" and "end" (the CLI draws its progress from it), and "hit" just
    before the "end" of a stage served from the compile cache.
    """
    graphs: list[GraphStats] = field(default_factory=list)
    dynamo_graphs: int = 0  # calls of the torch.compile backend (one per Dynamo graph)
    eager_graphs: int = 0  # Dynamo graphs run eagerly because the recompile budget was used up
    break_reasons: list[str] = field(default_factory=list)  # why Dynamo broke the graphs (backend.break_reason)
    on_stage: Callable[[str, str, str, str], None] | None = None
    cache: str | None = None  # the compile cache backend used (None: no cache)
    # where the first call's time went, once a window measured it (pipec.explain, pipec bench)
    profile: CompileProfile = field(default_factory=CompileProfile)
    # the compiled model's LoadContext, shared by every graph its runtime loads (made by the first
    # compile_graph when pipec.compile did not make one)
    context: LoadContext | None = None
    keep_programs: bool = False  # each GraphStats keeps its Program's JSON (aot_cache.py stores it)
    _dump_names: set[str] = field(default_factory=set)

    def unique_name(self, name: str) -> str:
        base, i = name, 1
        while name in self._dump_names:
            name = f"{base}_{i}"
            i += 1
        self._dump_names.add(name)
        return name

    def forget(self, graphs: list[GraphStats]) -> None:
        """Take `graphs` out of the session, their names free again (a graph loaded from
        AOTAutograd's cache that torch then compiled after all)."""
        gone = {id(g) for g in graphs}
        self.graphs = [g for g in self.graphs if id(g) not in gone]
        self._dump_names.difference_update(g.name for g in graphs)

    # totals, for reports
    @property
    def op_count(self) -> int:
        return sum(g.op_count for g in self.graphs)

    @property
    def kernel_count(self) -> int:
        return sum(g.kernel_count for g in self.graphs)

    @property
    def fusion_count(self) -> int:
        return sum(g.fusion_count for g in self.graphs)

    @property
    def extern_ops(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for g in self.graphs:
            for target, reason in g.extern_ops:
                out.setdefault(target, reason)
        return dict(sorted(out.items()))

    @property
    def not_fused(self) -> list[tuple[str, str, str]]:
        return [item for g in self.graphs for item in g.not_fused]

    @property
    def stage_seconds(self) -> dict[str, float]:
        out = {s: 0.0 for s in STAGE_ORDER}
        for g in self.graphs:
            for s, t in g.stage_seconds.items():
                out[s] = out.get(s, 0.0) + t
        return out

    @property
    def kernels(self) -> list[tuple[str, str]]:
        return [k for g in self.graphs for k in g.kernels]

    def _cache_count(self, outcome: str) -> dict[str, int]:
        looked_up = [s for s in CACHED_STEPS if any(s in g.cache for g in self.graphs)]
        return {s: sum(1 for g in self.graphs if g.cache.get(s) == outcome) for s in looked_up}

    @property
    def cache_hits(self) -> dict[str, int]:
        """Stage -> graphs whose output came from the compile cache (stages looked up); "aot_autograd":
        graphs AOTAutograd's cache served whole (aot_cache.py)."""
        return self._cache_count("hit")

    @property
    def cache_misses(self) -> dict[str, int]:
        return self._cache_count("miss")


def restore_stats(stats: GraphStats, kind: str, snapshot: dict,
                  plan_loader: Callable[[str], Callable[[], Any] | None] | None = None) -> None:
    """The counts of a graph loaded from AOTAutograd's cache (aot_cache.stats_snapshot), put back
    on the GraphStats its Program's load made, with the warnings its capture gave.
    `plan_loader(key)`: a loader of the stored plan, read at the first read of `stats.plan`."""
    stats.kind = kind
    stats.plan_key = snapshot.get("plan_key")
    if stats.plan_key is not None and plan_loader is not None:
        stats._plan_loader = plan_loader(stats.plan_key)
    stats.op_count, stats.fusion_count = snapshot["op_count"], snapshot["fusion_count"]
    stats.extern_ops = [tuple(e) for e in snapshot["extern_ops"]]
    stats.not_fused = [tuple(r) for r in snapshot["not_fused"]]
    stats.units = snapshot["units"]
    if stats.program is not None:
        stats.kernel_rows = kernel_rows(stats.units, stats.program)
    stats.cache["aot_autograd"] = "hit"
    warn_extern_calls(stats.extern_ops, stats.name)


def warn_extern_calls(extern_ops: list[tuple[str, str]], name: str) -> None:
    """One warning per ATen op that runs through torch for lack of a lowering (not library
    calls, random ops left to torch on request, or a library's own custom ops): `extern_ops` is
    (target, reason) of each extern node of graph `name`."""
    seen = set()
    for target, reason in extern_ops:
        if reason in pipec_ir.INTENDED_EXTERN_REASONS or target in seen:  # asked for, not missing
            continue
        seen.add(target)
        warnings.warn(f"pipec: {target} runs through torch as an extern call in graph {name} ({reason})",
                      PipecFallbackWarning, stacklevel=3)


def add_stats(stats: GraphStats, doc) -> None:
    if isinstance(doc, pipec_ir.Graph):
        stats.add_graph(doc)
    elif isinstance(doc, pipec_ir.KernelPlan):
        stats.add_graph(doc.graph)
        stats.add_plan(doc)
    elif isinstance(doc, pipec_ir.Program):
        stats.add_program(doc)
