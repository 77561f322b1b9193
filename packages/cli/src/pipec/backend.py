"""pipec as a torch.compile backend.

`torch.compile(model, backend="pipec")` finds `pipec_backend` through the
`torch_dynamo_backends` entry point; `pipec.compile` binds options with
`make_backend`. Dynamo hands each captured graph to the capture stage's
`dynamo_backend`, which lowers it to ATen (AOTAutograd) and calls back
`compile_aten_graph` for the pipeline proper.
"""

from __future__ import annotations

import warnings

from pipec_ir import CompileOptions, RecompileLimitError

from .errors import PipecConfigError, PipecError, PipecFallbackWarning, find_pipec_error
from .gc_pause import gc_paused
from .graph_devices import compute_device, on_graph_devices
from .logs import configure_logs, logger
from .options import make_options
from .pipeline import Session, compile_graph
from .plugins import get_registry


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
        capture = get_registry().get("capture", options.capture)
        dynamo_backend = getattr(capture, "dynamo_backend", None)
        if dynamo_backend is None:
            raise PipecError(f"capture ({options.capture}) cannot run under torch.compile: it has no "
                             f"dynamo_backend; use capture 'dynamo'", stage="capture", impl=options.capture)

        def compile_aten_graph(aten_gm, aten_inputs, kind="inference"):
            name = f"{prefix}_{index}" if kind in ("inference", "forward", None) else f"{prefix}_{index}_{kind}"
            first_new = len(session.graphs)
            fn = compile_graph(aten_gm, aten_inputs, options, session=session, name=name)
            for stats in session.graphs[first_new:]:
                stats.kind = kind or "inference"
            device = compute_device(aten_gm)
            fn = on_graph_devices(tensors_only(fn, aten_inputs, device), aten_gm, aten_inputs, device)
            fn = with_size_outputs(fn, aten_gm, aten_inputs, name)
            return with_object_outputs(fn, aten_gm, aten_inputs)

        # the graph as Dynamo traced it: a capture may rewrite `gm` in place before it fails
        # (attention kernels, padded classes), and the eager fallback must run what the user wrote.
        # A bound method keeps the code it was bound with, whatever `gm.recompile()` installs
        # later, once that code is real: Dynamo's graph is lazy (its forward generates the code at
        # the first call, from the graph as it is then); AOTAutograd's trace would generate it anyway
        as_traced = realized(gm).forward
        try:
            return aten_backend(dynamo_backend, compile_aten_graph, options)(gm, example_inputs)
        except RecompileLimitError:
            raise
        except Exception as exc:
            # outside fullgraph a graph pipec cannot compile runs as Dynamo traced it, eagerly,
            # with one warning naming it; `pipec compile` and `explain` report it instead
            found = find_pipec_error(exc)
            if options.fullgraph or not options.get("eager_fallback", True) or isinstance(found, PipecConfigError):
                raise
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


def aten_backend(dynamo_backend, compile_aten_graph, options: CompileOptions):
    """`capture.dynamo_backend(compile_aten_graph, options)`; a capture whose dynamo_backend takes
    no options (the older form) is called without them. The options carry what the capture
    needs before AOTAutograd runs (decompose_attention)."""
    import inspect

    try:
        takes_options = len(inspect.signature(dynamo_backend).parameters) >= 2
    except (TypeError, ValueError):
        takes_options = False
    return dynamo_backend(compile_aten_graph, options) if takes_options else dynamo_backend(compile_aten_graph)


def tensors_only(fn, example_inputs, device=None):
    """A graph with dynamic shapes also takes its size symbols as (int) arguments; the
    Program's inputs are the tensors (the runtime binds sizes from their shapes), then, for each
    int argument whose size no tensor argument has as a dimension, a 1-D int8 tensor of that
    length, never read (docs/IR.md, "Graph": a backward graph takes the reduced dim of
    `x.sum(1)` as an int). Without tensor arguments those are made on `device` (the graph's,
    graph_devices.py), which the runtime then runs on."""
    import torch

    keep = [i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor)]
    if len(keep) == len(example_inputs):
        return fn
    sizes = _size_only_positions(example_inputs)

    def tensors_of(args):
        tensors = [args[i] for i in keep]
        if sizes:
            where = tensors[0].device if tensors else device
            tensors += [torch.empty(int(args[j]), dtype=torch.int8, device=where) for j in sizes]
        return tensors

    def call(args):
        return fn(tensors_of(args))

    call.pipec_runtime = fn
    owned = getattr(fn, "call_owned", None)
    if owned is not None:  # a backward with sizes among its inputs still frees what it has read
        def call_owned(args):
            tensors = tensors_of(args)
            args.clear()
            return owned(tensors)

        call.call_owned = call_owned
    return call


def _size_only_positions(example_inputs) -> list[int]:
    """Positions of the SymInt arguments that carry a size no tensor argument has as a dimension
    (each symbol once): the capture stage's `size_only_placeholders` rule."""
    import torch

    dims = {d.node.expr for x in example_inputs if isinstance(x, torch.Tensor)
            for d in x.shape if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol}
    out = []
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.SymInt) and x.node.expr.is_Symbol and x.node.expr not in dims:
            dims.add(x.node.expr)
            out.append(i)
    return out


def with_size_outputs(fn, gm, example_inputs, name: str = "graph"):
    """With dynamic shapes, AOTAutograd's forward graph also returns sizes (SymInts it saves
    for the backward graph) and, on torch 2.11, the checks of unbacked ones (SymBools such as
    `u0 >= 0`, which the backward asserts). A Program returns None for a non-tensor output, so
    each such output is computed here from the sizes of this call's inputs."""
    import torch

    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else (out_node.args[0],)
    vals = [o.meta.get("val") if isinstance(o, torch.fx.Node) else o for o in outs]
    sizes = {i: v for i, v in enumerate(vals) if isinstance(v, (int, bool, torch.SymInt, torch.SymBool))}
    if not sizes:
        return fn
    sources = _symbol_sources(example_inputs)
    recomputed = _unbacked_sources(gm, sources)
    size_fns = {}
    for i, v in sizes.items():
        expr = v.node.expr if isinstance(v, (torch.SymInt, torch.SymBool)) else v
        missing = [str(s) for s in getattr(expr, "free_symbols", ()) if s not in sources and s not in recomputed]
        if missing:
            raise PipecError(f"graph {name} returns the size {expr}, but no input has size {', '.join(missing)}",
                             stage="runtime", graph=name)
        size_fns[i] = _size_function(expr, sources, recomputed, truth=isinstance(v, (bool, torch.SymBool)))

    def call(args):
        out = list(fn(args))
        for i, size_of in size_fns.items():
            out[i] = size_of(args)
        return out

    call.pipec_runtime = getattr(fn, "pipec_runtime", fn)
    return call


def with_object_outputs(fn, gm, example_inputs):
    """Under tensor parallel, AOTAutograd's graphs take DTensor's DeviceMesh (an opaque object)
    as inputs and return them unchanged (the forward saves the mesh for the backward graph).
    The Program has no such input and returns None there (capture's `opaque_input`): each such
    output is the object this call passed."""
    import torch

    placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else (out_node.args[0],)
    plain = (torch.Tensor, int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool, type(None))
    passed = {k: placeholders[o] for k, o in enumerate(outs)
              if o in placeholders and not isinstance(example_inputs[placeholders[o]], plain)}
    if not passed:
        return fn

    def call(args):
        out = list(fn(args))
        for k, i in passed.items():
            out[k] = args[i]
        return out

    call.pipec_runtime = getattr(fn, "pipec_runtime", fn)
    return call


def _symbol_sources(example_inputs) -> dict:
    """Size symbol -> (input index, dim) where an input tensor has it as a size, or (input index, None)
    where an int input is that symbol."""
    import torch

    sources: dict = {}
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.SymInt) and x.node.expr.is_Symbol:
            sources.setdefault(x.node.expr, (i, None))
        elif isinstance(x, torch.Tensor):
            for d, size in enumerate(x.shape):
                if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                    sources.setdefault(size.node.expr, (i, d))
    return sources


def _size_function(expr, sources: dict, recomputed: dict | None = None, truth: bool = False):
    """`f(args) -> int`: the size `expr` for a call with `args`, its symbols read off the inputs
    (`sources`) or recomputed from them (`recomputed`: symbol -> f(args)); with `truth`, `expr`
    is a condition on sizes and gives a bool."""
    convert = bool if truth else int
    if not getattr(expr, "free_symbols", None):
        value = convert(expr)
        return lambda args: value
    used = {s: sources[s] for s in expr.free_symbols if s in sources}
    derived = {s: recomputed[s] for s in expr.free_symbols if s not in sources}

    def size_of(args):
        values = {s: (args[i] if d is None else args[i].shape[d]) for s, (i, d) in used.items()}
        values.update({s: f(args) for s, f in derived.items()})
        return convert(expr.xreplace({s: int(v) for s, v in values.items()}))

    return size_of


def _unbacked_sources(gm, sources: dict) -> dict:
    """Unbacked symbol -> `f(args) -> int`, for each one a node of `gm` binds from its result's
    sizes while its own inputs' sizes are known (torch 2.11's fake slice leaves the length of
    `x[:, -3:]` on a dynamic dim unbacked, and AOTAutograd returns it for the backward): the
    node runs again on meta tensors of this call's input sizes and the size is read off."""
    import torch

    found = {}
    for node in gm.graph.nodes:
        for sym, path in (node.meta.get("unbacked_bindings") or {}).items():
            fn = _rerun_on_meta(node, path, sources)
            if fn is not None:
                found[sym] = fn
                out = node.meta.get("val")
                for key in path:  # the symbol the result's type names, after the shape env's replacements
                    out = key.get(out)
                if isinstance(out, torch.SymInt) and out.node.expr.is_Symbol:
                    found.setdefault(out.node.expr, fn)
    return found


def _rerun_on_meta(node, path, sources: dict):
    """`f(args) -> int` running `node` on meta tensors sized for the call and following `path`
    (its unbacked binding's key path) into the result; None where an input size is not known."""
    import torch

    def size_fn(v):
        expr = v.node.expr if isinstance(v, torch.SymInt) else v
        if any(s not in sources for s in getattr(expr, "free_symbols", ())):
            raise KeyError(expr)
        return _size_function(expr, sources)

    def plan(a):  # the argument as a function of the call's args
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
        if isinstance(val, torch.Tensor):
            dims, dtype = [size_fn(d) for d in val.shape], val.dtype
            return lambda args: torch.empty([d(args) for d in dims], dtype=dtype, device="meta")
        if isinstance(val, torch.SymInt):
            return size_fn(val)
        return lambda args: val

    try:
        args = [plan(a) for a in node.args]
        kwargs = {k: plan(v) for k, v in node.kwargs.items()}
    except KeyError:
        return None

    def value(args_now):
        out = node.target(*(a(args_now) for a in args), **{k: v(args_now) for k, v in kwargs.items()})
        for key in path:
            out = key.get(out)
        return int(out)

    return value


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
