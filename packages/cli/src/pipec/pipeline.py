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
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

import pipec_ir
from pipec_ir import CompileOptions, CompileProfile, LoadContext

from .bench_measure import usable_cpus
from .cache import open_cache, shape_env_state, source_digest, stage_key, text_digest
from .constants import bind_constants, graph_constants
from .errors import PipecConfigError, PipecError
from .gc_pause import gc_paused
from .logs import log_stage, stage_logged
from .plugins import get_plugin_manager, get_registry
from .session import (COMPUTE_KINDS, GraphStats, Session, add_stats, is_compute, kernel_rows, plan_units,  # noqa: F401 (re-exported)
                      restore_stats, warn_extern_calls)


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
    warn_extern_calls([(n.attr("target"), n.attr("reason", "")) for n in graph.nodes if n.op == "extern"], name)


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


# ---------------------------------------------------------------- one stage, through the compile cache


def run_stage(stage: Stage, impl, doc, options: CompileOptions, example_inputs, context: LoadContext | None = None):
    """Run one stage: (its document, the document's canonical JSON; None for the runtime's callable)."""
    out = stage.run(impl, doc, options, example_inputs=example_inputs, context=context)
    if stage.kind is None:
        return out, None
    return serialize_boundary(out, stage.kind)


@dataclass(frozen=True)
class Unparsed:
    """A stage's document served from the compile cache and not parsed: the next stage's entry was
    found too, so only what reads this one (GraphStats, on first use) parses it."""
    cache: Any
    key: str
    kind: str
    text: str

    def parse(self):
        return self.cache.parse(self.key, self.kind, self.text)


def run_stage_cached(cache, stage: Stage, entry: pipec_ir.Entry, doc, digest: str | None,
                     options: CompileOptions, example_inputs, context: LoadContext | None = None,
                     load_options: frozenset[str] = frozenset(), *, found: tuple[str, Any] | None = None,
                     fetch_next: Callable[[str], tuple[str, Any] | None] | None = None):
    """run_stage through the compile cache: (document, JSON, "hit" | "miss" | None if not cached,
    the next stage's entry (text, document) when it was fetched ahead).

    `found`: this stage's entry, fetched by the previous stage. `fetch_next(text)`: the next
    stage's entry for this stage's output, read and parsed, or None. Where it exists, a hit is
    returned `Unparsed`: the next stage needs only its digest (parsing a 24-layer decoder's
    KernelPlan costs a warm compile ~0.3 s), and a plan that fails its parse later costs
    statistics, never the compile.

    The key is `stage_key` of the stage, its implementation and version, the options (less
    the runtime's `load_options`) and `digest` (the input's). A capture that changed its input's
    symbolic-shape environment while it ran (added guards) is not stored: replaying it would lose
    that change.
    """
    if found is not None:
        text, parsed = found
        return parsed, text, "hit", fetch_next(text) if fetch_next is not None else None
    key = stage_key(stage.name, entry, options, digest, load_options) if cache and stage.kind and digest else None
    if key is None:
        return (*run_stage(stage, entry.impl, doc, options, example_inputs, context), None, None)
    text = cache.load_text(key)
    if text is not None:
        ahead = fetch_next(text) if fetch_next is not None else None
        if ahead is not None:
            return Unparsed(cache, key, stage.kind, text), text, "hit", ahead
        parsed = cache.parse(key, stage.kind, text)
        if parsed is not None:
            return parsed, text, "hit", None
    shapes = shape_env_state(doc, example_inputs) if stage.name == "capture" else ()
    out, text = run_stage(stage, entry.impl, doc, options, example_inputs)
    if stage.name != "capture" or shape_env_state(doc, example_inputs) == shapes:
        cache.store(key, text)
    return out, text, "miss", None


def plan_loader(options: CompileOptions, key: str) -> Callable[[], Any] | None:
    """A loader of the KernelPlan the compile cache holds under `key` (GraphStats.plan_key), or
    None where the cache is off."""
    cache = _open_cache(options, get_registry())
    if cache is None:
        return None

    def load():
        text = cache.load_text(key)
        return cache.parse(key, "kernel_plan", text) if text is not None else None
    return load


def _open_cache(options: CompileOptions, registry: pipec_ir.Registry):
    try:
        return open_cache(options.cache, registry)
    except pipec_ir.UnknownStageError as exc:
        raise PipecConfigError(f"cache ({options.cache}): {exc}", stage="cache", impl=options.cache) from exc


# an IR document given to compile_graph starts the pipeline after the stage that makes it
FIRST_STAGE_FOR = {pipec_ir.Graph: "fusion", pipec_ir.KernelPlan: "codegen", pipec_ir.Program: "runtime"}


# ---------------------------------------------------------------- the pipeline


def _may_defer(stage: Stage, options: CompileOptions, stop_after: str | None) -> bool:
    """Whether a cache hit of `stage` may stay unparsed: nothing but GraphStats reads its
    document (capture's is read for constants and fallback warnings; dumps, logs, observers
    and a caller stopping there read theirs)."""
    return (stage.name != "capture" and stop_after != stage.name and not options.dump_dir
            and not stage_logged(stage.name)
            and not get_plugin_manager().hook.pipec_stage_finished.get_hookimpls())


def _lookahead(rest: tuple[Stage, ...], registry: pipec_ir.Registry, options: CompileOptions,
               load_options: frozenset[str], cache,
               profile: CompileProfile) -> Callable[[str], tuple[str, Any] | None] | None:
    """The next stage's cache entry (text, parsed document) for this stage's output text, or None
    where it is missing or bad (None: the next stage is not cached, or unknown, which its own
    turn reports). Its reading counts in the next stage's part of the compile-time profile."""
    if not rest or rest[0].kind is None:
        return None
    try:
        entry = registry.entry(rest[0].name, rest[0].impl_name(options))
    except pipec_ir.UnknownStageError:
        return None

    def fetch(text: str) -> tuple[str, Any] | None:
        with profile.part(PROFILE_PARTS.get(rest[0].name, rest[0].name)):
            key = stage_key(rest[0].name, entry, options, text_digest(text), load_options)
            found = cache.load_text(key)
            parsed = cache.parse(key, rest[0].kind, found) if found is not None else None
        return (found, parsed) if parsed is not None else None
    return fetch


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
        add_stats(stats, doc)
    ahead = None  # this stage's entry (text, document), fetched by the previous stage's lookahead
    for i, stage in enumerate(stages):
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
                if cache is not None and stage.name == "fusion" and digest is not None:
                    stats.plan_key = stage_key(stage.name, entry, stage_options, digest, load_options)
                fetch_next = _lookahead(stages[i + 1:], registry, options, load_options, cache, profile) \
                    if cache is not None and _may_defer(stage, options, stop_after) else None
                doc, text, cached, ahead = run_stage_cached(cache, stage, entry, doc, digest, stage_options,
                                                            example_inputs, context, load_options, found=ahead,
                                                            fetch_next=fetch_next)
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
        if stage.kind == "program" and session.keep_programs:
            stats.program_text = text
        if isinstance(doc, Unparsed):
            stats.defer(doc.parse)
        else:
            add_stats(stats, doc)
        if stage_logged(stage.name):  # (then no document is left Unparsed, and the plan's units are read)
            log_stage(stage.name, stats.name, doc, stats.units if stage.name == "fusion" else None)
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
