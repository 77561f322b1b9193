"""The public Python API: `pipec.compile` and `pipec.explain`."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipec_ir import DEFAULT_RECOMPILE_LIMIT, CompileOptions, RecompileBudget, RecompileLimitError

from .backend import make_backend
from .dynamo_failures import DynamoFallback, dynamo_failure
from .errors import PipecError, find_error, find_pipec_error
from .options import make_options
from .pipeline import Session, make_load_context
from .profile import first_call
from .trace_settings import call_settings, settings_scope, size_oblivious


def _model_name(model) -> str:
    name = getattr(model, "__name__", None) or type(model).__name__
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name).lower() or "graph"


def compile_with_session(model, options: CompileOptions, session: Session | None = None,
                         name: str | None = None):
    """torch.compile(model) through pipec; returns (compiled callable, Session recording every graph).

    The model gets its own recompile budget (`recompile_limit`, default 8), shared by Dynamo
    recompiles and CUDA Graph re-records (see README, "Dynamic shapes").
    """
    import torch

    session = session if session is not None else Session()
    if session.context is None or session.context.budget is None:
        budget = RecompileBudget(options.get("recompile_limit", DEFAULT_RECOMPILE_LIMIT),
                                 strict=options.fullgraph, name=name or _model_name(model))
        # the model's live state, shared by every graph its runtime loads; the runtime records the
        # first call's parts in the session's profile
        session.context = make_load_context(options, budget=budget, profile=session.profile)
    budget = session.context.budget
    if size_oblivious(options):
        warnings.warn("pipec: size_oblivious=True traces dynamic sizes as if never 0 or 1, unguarded: "
                      "a result that depends on a dynamic size being 1 (x.squeeze(0), a broadcast of it) "
                      "is wrong at that size", stacklevel=3)
    backend = make_backend(options, session, prefix=name or _model_name(model))
    with session.profile.part("imports"):  # a process's first torch.compile imports Dynamo's backends
        compiled = torch.compile(model, backend=backend, fullgraph=options.fullgraph, dynamic=options.dynamic)
    compiled = _in_call_context(compiled, options, budget)
    _keep_on_wrapper(compiled, "pipec_budget", budget)
    return compiled, session


def _keep_on_wrapper(compiled, name: str, value) -> None:
    """Store pipec's state on the object torch.compile returned, never on the user's module: an
    OptimizedModule forwards setattr to the module it wraps, and a Session (it holds a lock)
    there would stop the module being deep-copied, pickled or saved."""
    with contextlib.suppress(AttributeError, TypeError):  # an object without a __dict__
        object.__setattr__(compiled, name, value)


def _in_call_context(compiled, options: CompileOptions, budget: RecompileBudget):
    """`compiled`, each call running under `call_settings` (trace_settings.py); a RecompileLimitError raised
    inside Dynamo reaches the caller as itself (not wrapped in BackendCompilerFailed)."""
    # worked out at each compile start: the budget may have run out since, and a library may have
    # added once-only logger methods after pipec.compile (trace_settings.call_settings)
    scope = settings_scope(lambda: call_settings(options, budget))

    def wrap(fn):
        fallback = DynamoFallback()  # how the calls run after Dynamo failed (dynamo_failures.py)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if fallback.mode != "compiled":
                return fallback.call(fn, scope, args, kwargs)
            try:
                with scope:
                    return fn(*args, **kwargs)
            except RecompileLimitError:
                raise
            except Exception as exc:
                found = find_error(exc, RecompileLimitError)
                if found is not None:
                    raise found from exc
                if options.fullgraph or not options.get("eager_fallback", True) or not dynamo_failure(exc):
                    raise
                return fallback.failed(fn, exc, args, kwargs)
        return call

    import torch

    if isinstance(compiled, torch.nn.Module):  # OptimizedModule: its forward is the Dynamo entry
        compiled.forward = wrap(compiled.forward)
        return compiled
    return wrap(compiled)


def compile(model=None, *, mode: str = "default", fusion: str = "default", runtime: str | None = None,
            dynamic: bool | None = None, fullgraph: bool = False, **options: Any):
    """Like torch.compile, with pipec as the backend.

    `mode="reduce-overhead"` selects the CUDA Graph runtime, `"max-autotune"` the CUDA Graph
    runtime with exhaustive tuning, `"max-autotune-no-cudagraphs"` exhaustive tuning with plain
    launches (modes.py; README, "Modes"); `fusion` and
    `runtime` name registered implementations (unknown names raise ValueError
    here, listing the registered ones); other keywords are CompileOptions fields
    (capture, codegen, cache, autotune, dump_dir) or plugin options (`extra`).

    Dynamic shapes: `dynamic=None` compiles static first and with symbolic sizes once a
    size changes (Dynamo's automatic dynamic shapes); True/False force it.
    `recompile_limit` (default 8) bounds recompiles plus CUDA Graph re-records of this
    model: past it, new graphs run eagerly with one warning (fullgraph=True: an error).
    `bucket="pow2"` (default) or `"exact"` is how sizes are grouped for autotuned configs
    and CUDA Graphs.
    """
    opts = make_options(mode=mode, fusion=fusion, runtime=runtime, dynamic=dynamic,
                        fullgraph=fullgraph, **options)
    if model is None:  # used as @pipec.compile(...)
        return lambda fn: compile_with_session(fn, opts)[0]
    compiled, session = compile_with_session(model, opts)
    _keep_on_wrapper(compiled, "pipec_session", session)
    return compiled


# ---------------------------------------------------------------- comparing with eager


def compare_outputs(actual, expected, *, atol: float | None = None, rtol: float | None = None,
                    reference: Callable[[], Any] | None = None) -> tuple[float | None, str | None]:
    """(max abs error over every tensor output, one-line mismatch or None) vs eager, dtype tolerances
    (assert_close's defaults; `atol` and `rtol`, given together, override them).

    `reference`, when given, returns the float64 result of the same model (structured like
    `expected`, or None when there is none); it is called once, and only when a bf16, fp16 or fp32
    output fails the tolerances: such an output still passes when it is about as close to float64
    as eager's (reference.py)."""
    from torch.utils._pytree import tree_flatten

    from .reference import flat_reference

    got, _ = tree_flatten(actual)
    want, _ = tree_flatten(expected)
    if len(got) != len(want):
        return None, f"compiled model returned {len(got)} outputs, eager {len(want)}"
    exact = flat_reference(reference, len(want))
    max_error: float | None = None
    problem = None
    for i, (a, e) in enumerate(zip(got, want)):
        err, found = _compare_output(i, a, e, atol, rtol, exact if problem is None else None)
        if err is not None:
            max_error = err if max_error is None else max(max_error, err)
        problem = problem or found
    if max_error is not None and math.isnan(max_error):
        problem = problem or "compiled output has NaN where eager does not"
    return max_error, problem


def _compare_output(i: int, a, e, atol, rtol, exact) -> tuple[float | None, str | None]:
    """(max abs error or None, mismatch or None) of output `i`; `exact()` its float64 judge."""
    import torch

    from .reference import max_abs_difference

    if not isinstance(e, torch.Tensor):
        return None, (f"output {i} is {a!r}, eager gives {e!r}" if a != e else None)
    if not isinstance(a, torch.Tensor):
        return None, f"output {i} is {type(a).__name__}, eager gives a tensor"
    if a.shape != e.shape or a.dtype != e.dtype:
        return None, f"output {i} is {a.dtype} {tuple(a.shape)}, eager gives {e.dtype} {tuple(e.shape)}"
    err = max_abs_difference(a, e.to(a.device), math.nan)  # a NaN eager lacks shows as NaN
    try:
        torch.testing.assert_close(a, e.to(a.device), equal_nan=True, atol=atol, rtol=rtol)
        return err, None
    except AssertionError as exc:
        detail = next((ln.strip() for ln in str(exc).splitlines() if ln.strip().startswith("Mismatched")), "")
        problem = (f"output {i} differs from eager: max abs error {err:.3g}"
                   + (f" ({detail.rstrip('.')})" if detail else ""))
    return err, _judged_by_float64(problem, i, a, e, exact)


def _judged_by_float64(problem: str, i: int, a, e, exact) -> str | None:
    """`problem`, or None when the compiled output is about as close to float64 as eager's; the
    strict verdict stands when there is no float64 result to judge by."""
    from .reference import REFERENCE_SLACK, close_enough, errors_against_float64

    worth_it = exact is not None and e.dtype in REFERENCE_SLACK  # a float64 run costs a forward (and backward)
    leaves = exact() if worth_it else None
    errors = errors_against_float64(a, e, leaves[i]) if leaves is not None else None
    if errors is None:
        return problem
    ours, eagers = errors
    if close_enough(ours, eagers, e.dtype):
        return None
    return f"{problem}; against float64 it is off by {ours:.3g}, eager by {eagers:.3g}"


# ---------------------------------------------------------------- explain


@dataclass
class ExplainReport:
    graph_count: int
    graph_break_count: int
    break_reasons: list[str]
    op_count: int
    kernel_count: int
    fusion_count: int
    extern_ops: dict[str, str]  # ATen overload -> why it ran as an extern call
    not_fused: list[tuple[str, str, str]]  # (first node, second node, reason)
    stage_seconds: dict[str, float]
    max_error: float | None = None  # vs eager PyTorch
    mismatch: str | None = None  # one line when outputs differ beyond dtype tolerances
    graphs: list[dict] = field(default_factory=list)  # per compiled (ATen) graph
    kernels: list[tuple[str, str]] = field(default_factory=list)  # (kernel name, Triton source)
    cache: str | None = None  # the compile cache backend ("local", "redis"), None when off
    cache_hits: dict[str, int] = field(default_factory=dict)  # stage -> graphs served from the cache
    cache_misses: dict[str, int] = field(default_factory=dict)  # stage -> graphs compiled and stored
    training: bool = False  # forward and backward graphs were compiled (and gradients compared)
    # where the first call's time went: {"wall_s", "seconds": {part: s, ..., "other": s}, "counts": {...}}
    # (pipec_ir.CompileProfile.to_dict; README, "Compile-time profile"); empty when not measured
    compile_profile: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what a user should know (e.g. nothing was compiled)

    def to_dict(self, with_code: bool = False) -> dict:
        out = {
            "notes": list(self.notes),
            "graph_count": self.graph_count, "graph_break_count": self.graph_break_count,
            "break_reasons": list(self.break_reasons), "op_count": self.op_count,
            "kernel_count": self.kernel_count, "fusion_count": self.fusion_count,
            "extern_ops": dict(self.extern_ops),
            "not_fused": [{"first": a, "second": b, "reason": r} for a, b, r in self.not_fused],
            "stage_seconds": dict(self.stage_seconds), "max_error": self.max_error,
            "mismatch": self.mismatch, "graphs": list(self.graphs),
            "cache": self.cache, "cache_hits": dict(self.cache_hits), "cache_misses": dict(self.cache_misses),
            "training": self.training, "compile_profile": self.compile_profile,
        }
        if with_code:
            out["kernels"] = [{"name": n, "source": s} for n, s in self.kernels]
        return out

    def to_json(self, with_code: bool = False, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(with_code), indent=indent)


def report_from_session(session: Session, *, break_reasons=None, graph_break_count=None,
                        max_error=None, mismatch=None) -> ExplainReport:
    graph_count = session.dynamo_graphs or len(session.graphs)
    return ExplainReport(
        graph_count=graph_count,
        graph_break_count=graph_break_count if graph_break_count is not None else max(graph_count - 1, 0),
        break_reasons=list(break_reasons if break_reasons is not None else session.break_reasons),
        op_count=session.op_count, kernel_count=session.kernel_count, fusion_count=session.fusion_count,
        extern_ops=session.extern_ops, not_fused=session.not_fused, stage_seconds=session.stage_seconds,
        max_error=max_error, mismatch=mismatch, graphs=[g.to_dict() for g in session.graphs],
        kernels=session.kernels,
        cache=session.cache, cache_hits=session.cache_hits, cache_misses=session.cache_misses,
        training=any(g.kind in ("forward", "backward") for g in session.graphs),
        compile_profile=session.profile.to_dict(),
        notes=session_notes(session),
    )


# Why Dynamo can hand a backend nothing, said where it did (docs/distributed.md)
NOTHING_COMPILED = (
    "Dynamo handed pipec no graph: nothing was compiled and the model ran eagerly. Dynamo does "
    "not trace torch's own module code behind one of torch's wrappers (torch layers wrapped in "
    "DDP, or used as FSDP units): put the layers in a module class of your own")


def session_notes(session: Session) -> list[str]:
    if session.dynamo_graphs == 0 and not session.graphs:
        return [NOTHING_COMPILED]
    return []


def run_and_compare(model, example_inputs, options: CompileOptions, session: Session | None = None, *,
                    name: str | None = None, expected: Any = None, training: bool | None = None):
    """Compile with pipec, run on the inputs and eagerly (unless `expected` is given);
    returns (compiled outputs, max_error, mismatch, session). Runs under torch.no_grad(),
    unless `training` (default: `is_training_model(model)`): then see `train_and_compare`."""
    import torch

    session = session if session is not None else Session()
    if training if training is not None else is_training_model(model):
        return train_and_compare(model, example_inputs, options, session, name=name)
    from .reference import no_grad_call

    # taken before the compiled run; an `expected` given was computed before it from the state at hand
    # (a no_grad forward changes no state its outputs depend on: train-mode BatchNorm updates its
    # running stats but normalizes with the batch's own)
    reference = _float64_reference(model, example_inputs, no_grad_call)
    with torch.no_grad():
        if expected is None:
            expected = model(*example_inputs)
        with first_call(session.profile):
            compiled, session = compile_with_session(model, options, session, name=name)
            actual = _surfacing_pipec_errors(compiled, *example_inputs)
    max_error, mismatch = compare_outputs(actual, expected, reference=lambda: _field(reference(), "outputs"))
    return actual, max_error, mismatch, session


def _float64_reference(model, example_inputs, run):
    """reference.lazy_float64_run, imported only here: `import pipec` stays free of torch."""
    from .reference import lazy_float64_run

    return lazy_float64_run(model, example_inputs, run)


def _field(run, name: str, key: str | None = None):
    """`run.name` (`[key]`), None when there is no float64 run or it lacks that entry."""
    value = getattr(run, name) if run is not None else None
    return value.get(key) if key is not None and value is not None else value


def _surfacing_pipec_errors(fn, *args):
    """fn(*args); a PipecError raised inside Dynamo reaches the caller as itself."""
    try:
        return fn(*args)
    except Exception as exc:
        found = find_pipec_error(exc)
        if found is not None:
            raise found from exc
        raise


def is_training_model(model) -> bool:
    """An nn.Module in training mode with trainable parameters (what a training loop compiles)."""
    import torch

    return (isinstance(model, torch.nn.Module) and model.training
            and any(p.requires_grad for p in model.parameters()))


def train_and_compare(model, example_inputs, options: CompileOptions, session: Session, *,
                      name: str | None = None):
    """One training-mode forward and backward, eager and compiled, from the same state.

    The compiled copy is a deepcopy of `model` taken first, so buffers updated in forward
    (BatchNorm running stats) start equal; each run gets its own copy of the inputs. The
    backward pass seeds every floating-point output with ones, which compiles AOTAutograd's
    backward graph too. Compares outputs, then parameter gradients, then buffers, in that order.
    A model that refuses to be copied (FSDP2's `fully_shard`) is compiled itself after its eager
    run, its gradients reset in between; its buffers are then not compared (one warning says so).
    Returns (compiled outputs, max_error, mismatch, session) like run_and_compare.
    """
    import copy
    import warnings

    import torch

    try:
        twin = copy.deepcopy(model)
    except Exception as exc:  # noqa: BLE001 - any refusal: compare on the model itself
        warnings.warn(f"pipec: {type(model).__name__} cannot be copied ({type(exc).__name__}: {exc}); the "
                      "compiled run uses the model itself after the eager run, and its buffers are not compared",
                      stacklevel=3)
        twin = None
    reference = _float64_reference(model, example_inputs, _forward_backward) if twin is not None else None

    def fresh_inputs():
        return [t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                for t in example_inputs]

    with torch.enable_grad():
        expected = _forward_backward(model, fresh_inputs())
        eager_grads = _named_grads(model)
        if twin is None:  # the model itself is compiled next: keep the eager gradients apart
            eager_grads = {n: g.detach().clone() for n, g in eager_grads.items()}
            model.zero_grad(set_to_none=True)
        inputs = fresh_inputs()
        with first_call(session.profile):  # forward and backward: the backward graph compiles in it
            compiled, session = compile_with_session(twin if twin is not None else model, options, session, name=name)
            actual = _surfacing_pipec_errors(_forward_backward, compiled, inputs)
    max_error, mismatch = compare_outputs(actual, expected, reference=lambda: _field(reference and reference(), "outputs"))
    compared = [("gradient", "gradients", _named_grads(twin if twin is not None else model), eager_grads)]
    if twin is not None:
        compared.append(("buffer", "buffers", dict(twin.named_buffers()), dict(model.named_buffers())))
    for what, field_name, ours, theirs in compared:
        for n in sorted(theirs):
            err, problem = compare_outputs(ours.get(n), theirs[n],
                                           reference=lambda f=field_name, k=n: _field(reference and reference(), f, k))
            if err is not None:
                max_error = err if max_error is None else max(max_error, err)
            if problem and mismatch is None:  # "output 0 differs ..." -> "gradient of fc.weight differs ..."
                mismatch = f"{what} of {n} {problem.removeprefix('output 0 ')}"
    return actual, max_error, mismatch, session


def _forward_backward(fn, inputs):
    """fn(*inputs), then a backward pass seeding every output that requires grad with ones."""
    import torch
    from torch.utils._pytree import tree_flatten

    with torch.enable_grad():
        out = fn(*inputs)
        seeds = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
        if seeds:
            torch.autograd.backward(seeds, [torch.ones_like(o) for o in seeds])
    return out


def _named_grads(model) -> dict:
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def explain(model, *example_inputs, **compile_kwargs) -> ExplainReport:
    """Compile `model` with pipec on `example_inputs` and report what happened (see ExplainReport)."""
    import torch

    compile_kwargs.setdefault("eager_fallback", False)  # a graph that fails is reported, not run eagerly
    # every stage runs or hits pipec's own cache: AOTAutograd's would serve a graph whole, without
    # its fusion decisions and plan (aot_cache.py)
    compile_kwargs.setdefault("aot_cache", False)
    opts = make_options(**compile_kwargs)
    torch._dynamo.reset()  # graphs, breaks and compile times of this model alone
    _, max_error, mismatch, session = run_and_compare(model, example_inputs, opts)
    torch._dynamo.reset()
    return report_from_session(session, max_error=max_error, mismatch=mismatch)


__all__ = ["ExplainReport", "PipecError", "compile", "explain", "make_options", "compare_outputs"]
