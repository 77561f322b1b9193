"""The pipeline manager: capture -> fusion -> codegen -> runtime, one flat list.

Read `PIPELINE` top to bottom: each stage takes the previous stage's document
and returns the next. Between stages every document is serialized and parsed
again (`cross_boundary`): a stage sees only what the IR carries, and an invalid
document is caught at the boundary where it was produced.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable

import pipec_ir
from pipec_ir import CompileOptions, CompileProfile, LoadContext

from .bench_measure import usable_cpus
from .cache import open_cache, shape_env_state, source_digest, stage_key, text_digest
from .constants import bind_constants, graph_constants
from .errors import PipecConfigError, PipecError, PipecFallbackWarning
from .gc_pause import gc_paused
from .logs import log_stage
from .plugins import get_plugin_manager, get_registry


# ---------------------------------------------------------------- the stages


def capture_graph(impl, source, options, *, example_inputs=(), **_):
    """ATen fx GraphModule ("dynamo") or model ("export") -> Graph."""
    return impl.capture(source, list(example_inputs), options)


def fuse_graph(impl, graph, options, **_):
    return impl.fuse(graph, options)


def generate_program(impl, plan, options, **_):
    return impl.generate(plan, options)


def load_program(impl, program, options, *, context: LoadContext | None = None, **_):
    """The runtime's callable; `context` (the model's LoadContext) goes to a runtime whose `load`
    takes it (pipec_ir.load_with), and a runtime written before it is called without."""
    return pipec_ir.load_with(impl, program, options, context)


# pipec.compile keywords that configure the model's LoadContext rather than the compile: they
# are taken out of the CompileOptions before any stage (or cache key) sees them
LOAD_CONTEXT_OPTIONS = ("kernel_dir", "tuning_cache", "compile_workers")
KERNEL_DIR_ENV = "PIPEC_KERNEL_DIR"  # where the runtime writes kernels and tuning results
COMPILE_WORKERS_ENV = "PIPEC_COMPILE_WORKERS"  # processes compiling Triton kernels (0: none)


def runtime_load_options(registry: pipec_ir.Registry, runtime: str) -> frozenset[str]:
    """The options runtime `runtime` declares it reads only when it loads a Program (its
    `load_options`): left out of cache keys, so a new size-bucket policy does not recompile."""
    try:
        impl = registry.get("runtime", runtime)
    except pipec_ir.UnknownStageError:
        return frozenset()
    return frozenset(getattr(impl, "load_options", ()))


def env_kernel_dir() -> str | None:
    """$PIPEC_KERNEL_DIR, where set (the runtime's default directory otherwise)."""
    return os.environ.get(KERNEL_DIR_ENV) or None


def env_compile_workers() -> int | None:
    """$PIPEC_COMPILE_WORKERS as a count, where set (the runtime's default otherwise)."""
    value = os.environ.get(COMPILE_WORKERS_ENV, "").strip()
    if not value:
        return None
    try:
        workers = int(value)
    except ValueError:
        raise PipecConfigError(f"{COMPILE_WORKERS_ENV}={value!r}: expected a whole number of processes "
                               f"(0: compile Triton kernels in this process)") from None
    return max(0, workers)


def ranks_share_host_workers() -> int | None:
    """Compile workers per process when torchrun started several ranks on this host
    ($LOCAL_WORLD_SIZE > 1): the host's cores shared among them (none below 3 each), so 8 ranks
    do not start one worker per core each. None otherwise (the runtime's default)."""
    try:
        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return None
    if ranks <= 1:
        return None
    share = usable_cpus() // ranks
    return share if share >= 3 else 0


def make_load_context(options: CompileOptions, *, budget: pipec_ir.RecompileBudget | None = None,
                      profile: CompileProfile | None = None) -> LoadContext:
    """The LoadContext of a model compiled with `options`: its recompile budget and compile
    profile, and the `kernel_dir` (else $PIPEC_KERNEL_DIR), `tuning_cache` and `compile_workers`
    (else $PIPEC_COMPILE_WORKERS, else a share of the host's cores per torchrun rank) options."""
    kernel_dir = options.get("kernel_dir") or env_kernel_dir()
    workers = options.get("compile_workers")  # checked by make_options
    return LoadContext(budget=budget, profile=profile, kernel_dir=None if kernel_dir is None else str(kernel_dir),
                       tuning_cache=bool(options.get("tuning_cache", True)),
                       compile_workers=next((w for w in (workers, env_compile_workers(), ranks_share_host_workers())
                                             if w is not None), None))


@dataclass(frozen=True)
class Stage:
    name: str  # also the registry stage and the --dump-ir suffix
    run: Callable
    kind: str | None  # IR document kind it produces ("graph", ...), None for the runtime callable

    def impl_name(self, options: CompileOptions) -> str:
        return getattr(options, self.name)


PIPELINE: tuple[Stage, ...] = (
    Stage("capture", capture_graph, "graph"),
    Stage("fusion", fuse_graph, "kernel_plan"),
    Stage("codegen", generate_program, "program"),
    Stage("runtime", load_program, None),
)
STAGE_NAMES = tuple(s.name for s in PIPELINE)
# each stage's part of the compile-time profile (pipec_ir.profile)
PROFILE_PARTS = {"capture": "capture", "fusion": "fusion", "codegen": "codegen", "runtime": "runtime_load"}


# ---------------------------------------------------------------- statistics


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
             "ops": [nodes[n].op for n in k.nodes if n in nodes and is_compute(nodes[n])]} for k in plan.kernels]


def kernel_rows(units: list[dict] | None, program: pipec_ir.Program) -> list[dict]:
    """`units` (plan_units; one per Triton kernel when the plan is not known) with how each runs,
    for `pipec explain`: a choice group's alternatives, a Triton kernel (a reduction's row held
    in registers or looped), or a library call. Views without a kernel are left out."""
    triton = {k.name: k for k in program.kernels}
    alternatives: dict[str, list[str]] = {}
    for step in program.steps:
        group = pipec_ir.get_attr(step.attrs, "choice")
        name = pipec_ir.get_attr(step.attrs, "alternative")
        if group is not None and name is not None and name not in alternatives.setdefault(group, []):
            alternatives[group].append(name)
    if units is None:
        units = [{"name": k.name, "kind": "", "shape": [], "ops": []} for k in program.kernels]
    rows = []
    for unit in units:
        name = unit["name"]
        if name in alternatives:
            runs = "the fastest of " + ", ".join(alternatives[name])
        elif name in triton:
            held = _row_held(triton[name])
            runs = "Triton" + {True: ", row held in registers", False: ", row looped", None: ""}[held]
        elif unit["kind"] == "view":
            continue  # index arithmetic on its consumers' loads: not a kernel
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
    cache: dict[str, str] = field(default_factory=dict)  # stage -> "hit" | "miss" (stages looked up)
    units: list[dict] | None = field(default=None, repr=False)  # plan_units(), once the plan is made
    # the documents themselves, for `pipec report` (its fusion picture, launch configs)
    plan: pipec_ir.KernelPlan | None = field(default=None, repr=False, compare=False)
    program: pipec_ir.Program | None = field(default=None, repr=False, compare=False)

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
        self.kernel_rows = kernel_rows(self.units, program)
        self.program = program

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
    _dump_names: set[str] = field(default_factory=set)

    def unique_name(self, name: str) -> str:
        base, i = name, 1
        while name in self._dump_names:
            name = f"{base}_{i}"
            i += 1
        self._dump_names.add(name)
        return name

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
        out = {s: 0.0 for s in STAGE_NAMES}
        for g in self.graphs:
            for s, t in g.stage_seconds.items():
                out[s] = out.get(s, 0.0) + t
        return out

    @property
    def kernels(self) -> list[tuple[str, str]]:
        return [k for g in self.graphs for k in g.kernels]

    def _cache_count(self, outcome: str) -> dict[str, int]:
        looked_up = [s for s in STAGE_NAMES if any(s in g.cache for g in self.graphs)]
        return {s: sum(1 for g in self.graphs if g.cache.get(s) == outcome) for s in looked_up}

    @property
    def cache_hits(self) -> dict[str, int]:
        """Stage -> graphs whose output came from the compile cache (stages looked up)."""
        return self._cache_count("hit")

    @property
    def cache_misses(self) -> dict[str, int]:
        return self._cache_count("miss")


# ---------------------------------------------------------------- boundaries


def cross_boundary(doc, kind: str):
    """Serialize and parse again: the next stage sees exactly what the IR carries."""
    return serialize_boundary(doc, kind)[0]


def serialize_boundary(doc, kind: str):
    """cross_boundary, also returning the document's canonical JSON (what the cache stores)."""
    if not isinstance(doc, tuple(pipec_ir.types.DOCUMENT_KINDS.values())):
        raise TypeError(f"returned {type(doc).__name__}, not a pipec_ir document ({kind})")
    text = pipec_ir.dumps(doc)
    return pipec_ir.loads(text, kind=kind), text  # loads verifies


def dump_document(dump_dir: str, name: str, stage: str, doc) -> None:
    directory = Path(dump_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.{stage}.json").write_text(pipec_ir.dumps(doc))
        (directory / f"{name}.{stage}.txt").write_text(pipec_ir.format_document(doc) + "\n")
    except OSError as exc:
        raise PipecConfigError(f"cannot write the IR of graph {name} to dump_dir {str(directory)!r}: "
                         f"{exc.strerror or exc}", stage=stage, graph=name) from exc


def warn_fallbacks(graph: pipec_ir.Graph, name: str) -> None:
    """One warning per ATen op that runs through torch for lack of a lowering (not library calls)."""
    seen = set()
    for n in graph.nodes:
        target, reason = n.attr("target"), n.attr("reason", "")
        if n.op != "extern" or reason == "library" or target in seen:
            continue
        seen.add(target)
        warnings.warn(f"pipec: {target} runs through torch as an extern call in graph {name} ({reason})",
                      PipecFallbackWarning, stacklevel=2)


def _notify_observers(stage: str, name: str, document: object, seconds: float) -> None:
    """Call each `pipec_stage_finished` observer on its own, in pluggy's order, so one that fails
    (one warning naming it) neither breaks the compilation nor keeps the others from seeing it."""
    hook = get_plugin_manager().hook.pipec_stage_finished
    kwargs = {"stage": stage, "name": name, "document": document, "seconds": seconds}
    impls = hook.get_hookimpls()
    if any(getattr(i, "hookwrapper", False) or getattr(i, "wrapper", False) for i in impls):
        impls = None  # wrappers need pluggy's own call: all observers in one call
    for impl in reversed(impls) if impls is not None else (None,):
        try:
            if impl is None:
                hook(**kwargs)
            else:
                impl.function(*(kwargs[arg] for arg in impl.argnames))
        except Exception as exc:  # an observer never breaks a compilation
            who = f"plugin {impl.plugin_name!r}" if impl is not None else "a pipec_stage_finished observer"
            warnings.warn(f"pipec: {who} failed in pipec_stage_finished after {stage} on {name}: {exc}",
                          stacklevel=2)


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _default_name(source) -> str:
    if isinstance(source, pipec_ir.Graph):
        return source.name
    if isinstance(source, pipec_ir.KernelPlan):
        return source.graph.name
    if isinstance(source, pipec_ir.Program):
        return source.name
    return "graph"


def _add_stats(stats: GraphStats, doc) -> None:
    if isinstance(doc, pipec_ir.Graph):
        stats.add_graph(doc)
    elif isinstance(doc, pipec_ir.KernelPlan):
        stats.add_graph(doc.graph)
        stats.add_plan(doc)
    elif isinstance(doc, pipec_ir.Program):
        stats.add_program(doc)


# ---------------------------------------------------------------- one stage, through the compile cache


def run_stage(stage: Stage, impl, doc, options: CompileOptions, example_inputs, context: LoadContext | None = None):
    """Run one stage: (its document, the document's canonical JSON; None for the runtime's callable)."""
    out = stage.run(impl, doc, options, example_inputs=example_inputs, context=context)
    if stage.kind is None:
        return out, None
    return serialize_boundary(out, stage.kind)


def run_stage_cached(cache, stage: Stage, entry: pipec_ir.Entry, doc, digest: str | None,
                     options: CompileOptions, example_inputs, context: LoadContext | None = None,
                     load_options: frozenset[str] = frozenset()):
    """run_stage through the compile cache: (document, JSON, "hit" | "miss" | None if not cached).

    The key is `stage_key` of the stage, its implementation and version, the options (less
    the runtime's `load_options`) and `digest` (the input's). A capture that changed its input's
    symbolic-shape environment while it ran (added guards) is not stored: replaying it would lose
    that change.
    """
    key = stage_key(stage.name, entry, options, digest, load_options) if cache and stage.kind and digest else None
    if key is None:
        return (*run_stage(stage, entry.impl, doc, options, example_inputs, context), None)
    found = cache.load(key, stage.kind)
    if found is not None:
        return (*found, "hit")
    shapes = shape_env_state(doc, example_inputs) if stage.name == "capture" else ()
    out, text = run_stage(stage, entry.impl, doc, options, example_inputs)
    if stage.name != "capture" or shape_env_state(doc, example_inputs) == shapes:
        cache.store(key, text)
    return out, text, "miss"


def _open_cache(options: CompileOptions, registry: pipec_ir.Registry):
    try:
        return open_cache(options.cache, registry)
    except pipec_ir.UnknownStageError as exc:
        raise PipecConfigError(f"cache ({options.cache}): {exc}", stage="cache", impl=options.cache) from exc


# an IR document given to compile_graph starts the pipeline after the stage that makes it
FIRST_STAGE_FOR = {pipec_ir.Graph: "fusion", pipec_ir.KernelPlan: "codegen", pipec_ir.Program: "runtime"}


# ---------------------------------------------------------------- the pipeline


def compile_graph(source: Any, example_inputs=(), options: CompileOptions | None = None, *,
                  session: Session | None = None, name: str | None = None,
                  registry: pipec_ir.Registry | None = None, stop_after: str | None = None):
    """Run the pipeline on one graph, with the garbage collector paused (gc_pause.py).

    `source` is what the capture stage takes (an ATen fx GraphModule for "dynamo",
    a model for "export"), or an IR document: a Graph starts at fusion, a
    KernelPlan at codegen, a Program at the runtime. Returns the runtime's
    callable (list of tensors -> list of outputs), or the document of
    `stop_after` ("capture", "fusion", "codegen").
    """
    with gc_paused():
        return _compile_graph(source, example_inputs, options, session=session, name=name, registry=registry,
                              stop_after=stop_after)


def _compile_graph(source: Any, example_inputs, options: CompileOptions | None, *, session: Session | None,
                   name: str | None, registry: pipec_ir.Registry | None, stop_after: str | None):
    options = options or CompileOptions()
    session = session if session is not None else Session()
    if session.context is None:  # the runtime records its load, compiles and first run in the session's profile
        session.context = make_load_context(options, profile=session.profile)
    context = session.context
    options = options.without(*LOAD_CONTEXT_OPTIONS)
    registry = registry or get_registry()
    load_options = runtime_load_options(registry, options.runtime)
    profile = session.profile
    profile.count("graphs")
    cache = _open_cache(options, registry)
    session.cache = cache.name if cache is not None else session.cache
    stats = GraphStats(name or _default_name(source))
    session.graphs.append(stats)
    doc = source
    digest = None  # of the current stage's input, for cache keys
    constants: dict = {}  # tensor constants of the captured graph, bound to the runtime's callable
    captured = None
    stages = PIPELINE
    if type(source) in FIRST_STAGE_FOR:
        first = FIRST_STAGE_FOR[type(source)]
        stages = PIPELINE[STAGE_NAMES.index(first):]
        doc = pipec_ir.verify(source)
        stats.name = session.unique_name(name or _default_name(source))
        _add_stats(stats, doc)
    for stage in stages:
        impl_name = stage.impl_name(options)
        label = stats.name
        try:
            entry = registry.entry(stage.name, impl_name)
        except pipec_ir.UnknownStageError as exc:
            raise PipecError(f"{stage.name} ({impl_name}) failed on graph {label}: {exc}",
                             stage=stage.name, impl=impl_name, graph=label) from exc
        if session.on_stage:
            session.on_stage(stage.name, impl_name, label, "start")
        start = time.perf_counter()
        try:
            with profile.part(PROFILE_PARTS.get(stage.name, stage.name)):
                if cache is not None and digest is None and stage.kind is not None:
                    digest = source_digest(doc, example_inputs)  # the first stage's input
                # the runtime names its calls in profiler traces after the graph (profiling.py)
                stage_options = options.with_extra(graph_name=stats.name) if stage.kind is None else options
                doc, text, cached = run_stage_cached(cache, stage, entry, doc, digest, stage_options, example_inputs,
                                                     context, load_options)
                digest = text_digest(text) if text is not None else None
        except PipecError:
            raise
        except Exception as exc:
            what = f"produced an invalid {stage.kind} document: " if isinstance(exc, pipec_ir.IRError) else ""
            raise PipecError(f"{stage.name} ({impl_name}) failed on graph {label}: {what}"
                             f"{type(exc).__name__}: {_one_line(exc)}",
                             stage=stage.name, impl=impl_name, graph=label) from exc
        seconds = time.perf_counter() - start
        stats.stage_seconds[stage.name] = seconds
        if cached is not None:
            stats.cache[stage.name] = cached
        if stage.name == "capture":
            stats.name = session.unique_name(name or doc.name)
            warn_fallbacks(doc, stats.name)
            constants = graph_constants(entry.impl, source, doc)
            captured = doc
        _add_stats(stats, doc)
        log_stage(stage.name, stats.name, doc, stats.units)
        if stage.kind is not None and options.dump_dir:
            dump_document(options.dump_dir, stats.name, stage.name, doc)
        _notify_observers(stage.name, stats.name, doc, seconds)
        if session.on_stage:
            if cached == "hit":
                session.on_stage(stage.name, impl_name, stats.name, "hit")
            session.on_stage(stage.name, impl_name, stats.name, "end")
        if stop_after == stage.name:
            return doc
    if constants:
        doc = bind_constants(doc, captured, constants)
    return doc
