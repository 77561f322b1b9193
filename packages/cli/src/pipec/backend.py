"""pipec as a torch.compile backend.

`torch.compile(model, backend="pipec")` finds `pipec_backend` through the
`torch_dynamo_backends` entry point; `pipec.compile` binds options with
`make_backend`. Dynamo hands each captured graph to the capture stage's
`dynamo_backend`, which lowers it to ATen (AOTAutograd) and calls back
`compile_aten_graph` for the pipeline proper.
"""

from __future__ import annotations

import warnings

import pipec_ir
from pipec_ir import CompileOptions, RecompileLimitError

from .aot_cache import (TAG_OPTION, cache_events_logged, cache_tag, in_cache_scope, loading, lookup_bypasses,
                        stats_snapshot, unpickle_layers)
from .cache import PipecCacheWarning, device_checks_dir
from .errors import (PipecConfigError, PipecError, PipecFallbackWarning, dynamo_splits_on_backend_errors,
                     find_pipec_error, graph_break_error)
from .gc_pause import gc_paused
from .graph_call import tensors_only, with_object_outputs, with_size_outputs
from .graph_devices import compute_device, on_graph_devices
from .logs import configure_logs, logger
from .options import make_options
from .pipeline import LOAD_CONTEXT_OPTIONS, Session, compile_graph, plan_loader, restore_stats, runtime_load_options
from .plugins import get_registry

CHECKS_OPTION = "device_checks_dir"  # what the front end hands the capture stage: cache.device_checks_dir


def make_backend(options: CompileOptions, session: Session | None = None, prefix: str = "graph"):
    """A torch.compile backend that runs the pipeline with `options`, recording into `session`.

    A Dynamo *recompile* (a later compilation of a frame already compiled, e.g. after a
    size changed) is charged to the recompile budget of the session's LoadContext when there is
    one (pipec.compile makes one per model); once it is used up, the recompiled graph runs
    eagerly (or, with fullgraph=True, `RecompileLimitError` is raised).
    """
    configure_logs()  # PIPEC_LOGS / TORCH_LOGS, read here, in the front end (logs.py)
    session = session if session is not None else Session()
    budget = session.context.budget if session.context is not None else None
    profile = session.profile
    charged: set[tuple] = set()
    registry = get_registry()
    # AOTAutograd's cache holds pipec's graphs under this tag (aot_cache.py); None: not used
    tag = cache_tag(options.without(*LOAD_CONTEXT_OPTIONS), registry,
                    runtime_load_options(registry, options.runtime))
    # the capture stage's verdicts on the device's libraries (its cuDNN attention check), kept
    # beside the compile cache, so a new process does not check again
    verdicts = device_checks_dir(options.cache, registry)
    session.keep_programs = session.keep_programs or tag is not None

    def backend(gm, example_inputs, **_ignored):
        warm_runtime(options, session)
        # Dynamo has traced the graph; what follows, up to the pipeline's own parts (compile_graph),
        # is AOTAutograd with the capture's graph rewrites before it (aot.make_dynamo_backend)
        with gc_paused(), profile.part("aot_autograd"):  # compile_graph pauses the collector too
            return compile_dynamo_graph(gm, example_inputs)

    def compile_dynamo_graph(gm, example_inputs):
        reason = break_reason(gm)
        if reason is not None:
            session.break_reasons.append(reason)
            logger("graph_breaks").info("graph %s_%d ends at a graph break: %s", prefix,
                                        session.dynamo_graphs, reason)
        compile_id = _compile_id()
        if budget is None and compile_id is not None and compile_id[1]:  # else the budget logs it
            logger("recompiles").info("recompile %d of frame %d (inputs %s)", compile_id[1], compile_id[0],
                                      _describe(example_inputs))
        if budget is not None and compile_id is not None and compile_id[1]:
            if compile_id not in charged:  # one charge per recompile, however many graphs it breaks into
                charged.add(compile_id)
                what = (f"recompile {compile_id[1]} of frame {compile_id[0]} "
                        f"(inputs {_describe(example_inputs)})")
                if not budget.charge(what):
                    charged.add(("eager",) + compile_id)
            if ("eager",) + compile_id in charged:
                session.eager_graphs += 1
                return gm.forward
        index = session.dynamo_graphs
        session.dynamo_graphs += 1
        capture = registry.get("capture", options.capture)
        dynamo_backend = getattr(capture, "dynamo_backend", None)
        if dynamo_backend is None:
            raise PipecError(f"capture ({options.capture}) cannot run under torch.compile: it has no "
                             f"dynamo_backend; use capture 'dynamo'", stage="capture", impl=options.capture)

        def graph_name(kind):
            return f"{prefix}_{index}" if kind in ("inference", "forward", None) else f"{prefix}_{index}_{kind}"

        def compile_aten_graph(aten_gm, aten_inputs, kind="inference"):
            if tag is not None:  # graphs loaded from AOTAutograd's cache before torch gave up on its entry
                session.forget([g for g in session.graphs[first_graph:] if g.cache.get("aot_autograd") == "hit"])
            name = graph_name(kind)
            first_new = len(session.graphs)
            fn = compile_graph(aten_gm, aten_inputs, options, session=session, name=name)
            for stats in session.graphs[first_new:]:
                stats.kind = kind or "inference"
            device = compute_device(aten_gm)
            fn = on_graph_devices(tensors_only(fn, aten_inputs, device), aten_gm, aten_inputs, device)
            fn = with_size_outputs(fn, aten_gm, aten_inputs, name)
            fn = with_object_outputs(fn, aten_gm, aten_inputs)
            if tag is None or not in_cache_scope(tag):
                return fn
            from .aot_entry import CompiledGraph  # imports Inductor's OutputCode: only under torch.compile

            stats = session.graphs[-1]
            # looked up and not found, or passed over (a node torch cannot vouch for, caches off)
            stats.cache["aot_autograd"] = "bypass" if lookup_bypasses() > bypasses else "miss"
            graph = CompiledGraph(fn, kind or "inference", stats.program_text, stats_snapshot(stats))
            stats.program_text = None  # the entry holds it now
            return graph

        def load_cached(graph):
            """A graph AOTAutograd found in its cache (an aot_entry.CompiledGraph): its Program loaded
            by the runtime stage, with its call layers put back around it."""
            first_new = len(session.graphs)
            try:
                program = pipec_ir.loads(graph.program_text, kind="program")
                runtime = compile_graph(program, (), options, session=session, name=graph_name(graph.kind))
                stats = session.graphs[-1]
                restore_stats(stats, graph.kind, graph.stats, lambda key: plan_loader(options, key))
                return unpickle_layers(graph.layers, runtime)
            except Exception as exc:
                session.forget(session.graphs[first_new:])  # AOTAutograd compiles the graph instead
                warnings.warn(f"pipec: graph {graph_name(graph.kind)} from AOTAutograd's cache could not be "
                              f"loaded ({type(exc).__name__}: {exc}); compiling it again", PipecCacheWarning,
                              stacklevel=2)
                raise

        # the graph as Dynamo traced it: a capture may rewrite `gm` in place before it fails
        # (attention kernels, padded classes), and the eager fallback must run what the user wrote.
        # A bound method keeps the code it was bound with, whatever `gm.recompile()` installs
        # later, once that code is real: Dynamo's graph is lazy (its forward generates the code at
        # the first call, from the graph as it is then); AOTAutograd's trace would generate it anyway
        as_traced = realized(gm).forward
        extra = {**({TAG_OPTION: tag} if tag is not None else {}), **({CHECKS_OPTION: verdicts} if verdicts else {})}
        aten_options = options.with_extra(**extra) if extra else options
        first_graph, bypasses = len(session.graphs), lookup_bypasses() if tag is not None else 0
        try:
            with loading(load_cached), cache_events_logged(f"{prefix}_{index}"):
                return aten_backend(dynamo_backend, compile_aten_graph, aten_options, profile)(gm, example_inputs)
        except RecompileLimitError:
            raise
        except Exception as exc:
            found = find_pipec_error(exc)
            if options.fullgraph or not options.get("eager_fallback", True) or isinstance(found, PipecConfigError):
                raise
            splittable = graph_break_error(exc) if found is None else None  # torch's own, not a stage's
            if splittable is not None and dynamo_splits_on_backend_errors():
                # an op fake tensors cannot trace (AOTAutograd reading data: EnCodec's and Mimi's
                # padding from a `.item()`): Dynamo splits the graph there and compiles the parts,
                # as it does for Inductor, instead of the whole graph running eagerly
                session.forget(session.graphs[first_graph:])
                what = f"{type(splittable).__name__}: {(str(splittable).splitlines() or [''])[0]}"
                warnings.warn(PipecFallbackWarning(
                    f"pipec: graph {prefix}_{index} reads data where AOTAutograd traces it ({what}); Dynamo "
                    "splits the graph there: that op runs eagerly, and so does the rest of its function "
                    "where Dynamo cannot resume after it"), stacklevel=2)
                raise splittable from None
            # outside fullgraph a graph pipec cannot compile runs as Dynamo traced it, eagerly,
            # with one warning naming it; `pipec compile` and `explain` report it instead
            why = str(found) if found is not None else f"{type(exc).__name__}: {exc}"
            warnings.warn(PipecFallbackWarning(
                f"pipec: graph {prefix}_{index} could not be compiled and runs eagerly: {why.splitlines()[0]}"),
                stacklevel=2)
            session.eager_graphs += 1
            return as_traced

    backend.pipec_options = options
    backend.pipec_session = session
    return backend


def realized(gm):
    """`gm` with its Python code generated now (torch.fx's lazy graph module defers that to
    the first call)."""
    real_recompile = getattr(gm, "real_recompile", None)
    if real_recompile is not None:
        real_recompile()
    return gm


def warm_runtime(options: CompileOptions, session: Session) -> None:
    """Let the runtime start what it needs for the first call now (an optional `warm(context)`
    of the runtime stage: pipec's starts its compile workers), while the graph is still being
    lowered. Best effort: a runtime that fails to warm is loaded as usual later."""
    try:
        runtime = get_registry().get("runtime", options.runtime)
    except Exception:  # noqa: BLE001 - an unknown runtime is reported where it is loaded
        return
    warm = getattr(runtime, "warm", None)
    if warm is None:
        return
    try:
        warm(session.context)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        logger("runtime").debug("runtime %s could not warm: %s: %s", options.runtime, type(exc).__name__, exc)


def break_reason(gm) -> str | None:
    """Why Dynamo ended the graph `gm` at a graph break, with the user's source line (None: no
    break ended it). What torch._dynamo.explain reports, read off the graph every backend receives,
    so explaining a model needs no second Dynamo trace."""
    why = getattr(gm, "compile_subgraph_reason", None)
    if why is None or not getattr(why, "graph_break", False):
        return None
    text = str(getattr(why, "reason", why)).strip().splitlines()
    stack = getattr(why, "user_stack", None) or []
    where = f" ({stack[-1].filename}:{stack[-1].lineno})" if stack else ""
    return (text[0] if text else "graph break") + where


def aten_backend(dynamo_backend, compile_aten_graph, options: CompileOptions, profile=None):
    """`capture.dynamo_backend(compile_aten_graph, options)`; a capture whose dynamo_backend takes
    no options (the older form) is called without them. The options carry what the capture
    needs before AOTAutograd runs (decompose_attention). A dynamo_backend with a `profile`
    parameter also gets the session's compile-time recorder (its device checks are timed apart)."""
    import inspect

    try:
        parameters = inspect.signature(dynamo_backend).parameters
    except (TypeError, ValueError):
        parameters = {}
    if "profile" in parameters and profile is not None:
        return dynamo_backend(compile_aten_graph, options, profile=profile)
    return dynamo_backend(compile_aten_graph, options) if len(parameters) >= 2 else dynamo_backend(compile_aten_graph)


def _compile_id() -> tuple[int, int] | None:
    """(frame id, how many times this frame was compiled before) of the Dynamo compilation running now."""
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001 - an older/newer torch without it: no recompile accounting
        return None
    if cid is None or cid.frame_id is None or cid.frame_compile_id is None:
        return None
    return (int(cid.frame_id), int(cid.frame_compile_id))


def _describe(example_inputs) -> str:
    import torch

    parts = []
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            parts.append("[" + ", ".join(str(s) for s in x.shape) + "]")
    return ", ".join(parts[:4]) + (", ..." if len(parts) > 4 else "")


def pipec_backend(gm, example_inputs, mode=None, options=None, **kwargs):
    """The `backend="pipec"` entry point: torch.compile(model, backend="pipec", options={...})."""
    merged = dict(options or {})
    merged.update(kwargs)
    opts = make_options(mode=mode or "default", **merged)
    return make_backend(opts)(gm, example_inputs)
