"""`pipec bench`: eager PyTorch, TorchInductor and pipec on one model, side by side, in one process.

Every backend's outputs are checked against eager (torch.testing.assert_close at the
dtype's tolerance, or the model file's `tolerance`) before it is timed. What is reported:

* **time**: on CUDA, the median of `triton.testing.do_bench` (which flushes L2 before every
  call). Every backend is compiled and checked first; then the backends are timed in
  `rounds` rounds, each in a rotated order, and a backend's time is the median of its
  rounds; while some backend's rounds disagree by more than 10%, up to `extra_rounds` more
  rounds of every backend are run (`rounds_run`). Timing each backend right after its own compile let the GPU's state decide: the
  same cuBLAS GEMM ran slower right after pipec's GPU-heavy autotuning than in eager's
  profile (docs/performance.md, "`pipec bench` compiles every backend before timing any").
  Without CUDA, the median wall time
  per call of a `time.perf_counter` loop; pipec's kernels then run in Triton's interpreter,
  so CPU numbers check the plumbing, not speed.
* **TB/s** (achieved memory bandwidth): bytes of the model's tensor inputs, parameters,
  buffers and outputs, each storage counted once, divided by the time. This is the least
  traffic one call can cause (every input read once, every output written once;
  intermediates, re-reads and spills are not counted), the same byte count for every
  backend, so it is exact for a perfectly fused program and an upper bound on the useful
  rate otherwise. On CUDA it is also given as a fraction of a device-to-device copy of the
  same number of bytes measured in the same run (`copy_tb_per_s`).
* **TFLOP/s**: FLOPs counted by `torch.utils.flop_counter.FlopCounterMode` on one eager call
  (matmuls, convolutions, attention; pointwise ops and reductions count 0); only when > 0.
* **kernels**: Triton kernels generated (pipec: its session, i.e. `pipec.explain`'s
  `kernel_count`, plus extern library calls; Inductor: `torch._inductor.metrics`).
  **launches**: GPU kernels one call launches, counted by `torch.profiler` (CUDA only;
  library kernels such as cuBLAS included, memcpy/memset not).
* **peak MiB**: peak GPU memory of one call above the memory allocated before it (after
  warm-up and timing; CUDA only): what the call's intermediates and outputs add to what is at rest.
  **held MiB**: the GPU memory a compiled backend keeps between calls, beyond the model's weights
  (CUDA Graph pools, preallocated buffers, static copies of inputs): the growth of the memory the
  allocator reserves across its cold compile and `bench_measure.SETTLE_CALLS` more calls, each
  holding the last result as a loop does, so that lazily recorded graphs count (caches emptied before and after; the
  float64 reference of the numerics check, when one is made then, not counted). A CUDA Graph replay
  allocates nothing outside its pool, so under reduce-overhead the peak is ~0 and the held memory
  is the figure to read.
* **compile cold / warm** (seconds): wall time of the first call of a freshly compiled
  model (Dynamo, the backend, kernel compilation, autotuning and that first run), with
  empty caches; warm is the same for a fresh copy of the model after `torch._dynamo.reset()`,
  served from pipec's compile cache (Inductor: its FX graph cache). Unless `keep_caches`,
  the run uses private, empty cache directories (pipec, Inductor, Triton) so that *cold*
  really is cold. A tiny function is compiled by every backend first, so one-time costs of
  the process (imports, first Dynamo trace, Inductor's compile workers starting, which are
  waited for; `pipec bench` starts them before it loads the model file, inside its private
  caches, so they start while the model builds) land on no backend's compile time; then the
  model itself is traced once by Dynamo alone (`first_trace_s`), so the first trace of *its*
  code (Dynamo's per-function analyses, which outlive `torch._dynamo.reset()`) lands on no
  backend either: without it the backend compiled first paid it alone (BERT base on the CPU:
  4.5 s against 2.9 for the same compile second). The JSON's `phase_seconds` splits the run's
  own wall time by phase (under `pipec bench` from loading the model file on: the model's copies,
  each backend's warm-up and the wait for Inductor's workers, trace, each compile, the rounds,
  launch counts, peaks), and
  each backend's `torch_compile_phases` splits its cold compile by torch's own counters
  (Dynamo's trace, the backend call, AOTAutograd, Inductor's phases), pipec's and Inductor's alike.

pipec runs in its `--mode`, and again in each extra mode asked for (`pipec_modes`, e.g.
reduce-overhead), one row each, like Inductor's modes. With `keep_going`, a compiled backend that
fails (compile error or outputs unlike eager's) keeps its row with the error, and the other
backends are still timed.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pipec_ir import CompileOptions

from . import bench_measure, bench_process
from .bench_measure import (
    copy_tb_per_s,
    count_flops,
    count_launches,
    cpu_median_ms,
    describe_inputs,
    graph_pool_bytes,
    io_bytes,
    measure_ms,
    peak_memory_mib,
    reserved_bytes,
    synchronize,
    tensors_in,
    timer_label,
)
from .bench_results import BackendResult, BenchResult, write_json
from .bench_table import bench_table, profile_table

INDUCTOR_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class BenchMismatch(Exception):
    """A backend's outputs differ from eager beyond the tolerance (one line)."""


@dataclass
class BenchOptions:
    pipec: CompileOptions
    inductor: bool | None = None  # None: only with CUDA
    inductor_modes: tuple[str, ...] = ("default",)
    warmup_ms: float = 25.0
    rep_ms: float = 100.0  # per backend and round
    rounds: int = 3  # timing rounds over all backends, each in a rotated order
    # more rounds, one at a time, while some backend's rounds still disagree by more than
    # bench_measure.ROUNDS_SPREAD_LIMIT: the median of three resists one disturbed round
    extra_rounds: int = 1
    pipec_modes: tuple[tuple[str, CompileOptions], ...] = ()  # extra pipec rows: (mode, its options)
    keep_going: bool = False  # a failing backend keeps its row with `error`; the others are still timed
    warm: bool = True  # compile every backend again from its caches after the timing (compile_warm_s)
    atol: float | None = None  # with rtol: the numerics check's tolerance (None: the dtype's)
    rtol: float | None = None
    keep_caches: bool = False


def _float64_bytes(expected) -> int:
    """Bytes of the float64 reference run's tensors, once the numerics check has made it (else 0)."""
    made = getattr(expected.float64, "cache_info", None)  # a function (no float64 run) has none
    if made is None or made().currsize == 0:
        return 0
    run = expected.float64()
    if run is None:
        return 0
    tensors = tensors_in([run.outputs, run.gradients, run.buffers])
    return sum(t.untyped_storage().nbytes() for t in {t.untyped_storage().data_ptr(): t for t in tensors}.values()
               if t.is_cuda)


# ---------------------------------------------------------------- one backend


def _first_call(make: Callable[[], Callable], inputs, device: str, reset: bool):
    """(compiled, outputs, seconds): compile and run once (torch.compile compiles on the first call).

    `reset` empties Dynamo's caches first, which a warm compile needs (else Dynamo would reuse its
    cache entry) but which also drops every earlier compiled model's entries: cold compiles do
    not reset, so the models compiled before them are timed as they were compiled (Dynamo keys
    its entries by backend and guards on the module object, so no backend reuses another's)."""
    import torch

    if reset:
        torch._dynamo.reset()
    start = time.perf_counter()
    compiled = make()
    with torch.no_grad():
        outputs = compiled(*inputs)
    synchronize(device)
    return compiled, outputs, time.perf_counter() - start


def _cold_compile(result: BackendResult, make: Callable[[], Callable], inputs, device: str):
    """(compiled, outputs) of the backend's cold compile, its seconds and torch's own counters over
    it (`torch_compile_phases`, the same split for every backend) recorded on `result`."""
    before = bench_measure.torch_compile_seconds()
    compiled, outputs, result.compile_cold_s = _first_call(make, inputs, device, reset=False)
    result.torch_compile_phases = bench_measure.torch_compile_seconds_since(before)
    return compiled, outputs


def _reset_dynamo() -> None:
    import torch

    torch._dynamo.reset()


def measures_inductor(inductor: bool | None, device: str) -> bool:
    """Whether a run times Inductor: as asked, else only on CUDA (`BenchOptions.inductor`)."""
    return inductor if inductor is not None else device.startswith("cuda")


@dataclass(frozen=True)
class Expected:
    """Eager's outputs, and the float64 run of the model (computed on the first output outside
    the dtype's tolerances, then shared): a bf16 output outside them still passes when it is
    about as close to float64 as eager's own (the rule `pipec compile` and `explain` apply)."""
    outputs: Any
    float64: Callable[[], Any]


def _compare(outputs, expected: Expected, options: BenchOptions) -> tuple[float | None, str | None]:
    """(max abs error against eager, why the outputs do not pass or None)."""
    from .api import compare_outputs

    def reference():
        run = expected.float64()
        return None if run is None else run.outputs

    return compare_outputs(outputs, expected.outputs, atol=options.atol, rtol=options.rtol, reference=reference)


def _check(label: str, outputs, expected: Expected, options: BenchOptions) -> float | None:
    max_error, mismatch = _compare(outputs, expected, options)
    if mismatch:
        raise BenchMismatch(f"{label} differs from eager: {mismatch}")
    return max_error


@dataclass
class Timed:
    """A compiled backend waiting for the timing rounds: its result row, one call of it, and
    its warm compile (run after every timing, since it resets Dynamo)."""
    result: BackendResult
    call: Callable[[], Any]
    warm: Callable[[], None] = lambda: None


def _timed(result: BackendResult, compiled, inputs, warm: Callable[[], None] = lambda: None) -> Timed:
    import torch

    def call():
        with torch.no_grad():
            return compiled(*inputs)

    return Timed(result, call, warm)


def time_rounds(pending: list[Timed], device: str, options: BenchOptions,
                progress: Callable[[str], None] = lambda message: None) -> int:
    """Time every compiled backend in `options.rounds` rounds, round r starting r places further
    along the list, so no backend always runs right after the same neighbour (a GPU heated by
    one backend's GEMMs clocks down for the next); each backend's time is its rounds' median.
    Then up to `options.extra_rounds` more rounds of every backend, one at a time, while some
    backend's rounds disagree by more than ROUNDS_SPREAD_LIMIT (a round another process or a
    clock drop disturbed: with two rounds their median is their mean, and one slow round moved
    a suite row by 25%, session 42). Returns the number of rounds run."""
    rounds = max(1, options.rounds)
    r = 0
    while r < rounds or (r < rounds + max(0, options.extra_rounds) and _rounds_disagree(pending)):
        progress(f"timing round {r + 1} of {rounds}" if r < rounds else f"timing round {r + 1}: rounds disagree")
        for timed in pending[r % len(pending):] + pending[:r % len(pending)]:
            if timed.result.error:
                continue
            try:
                timed.result.ms_rounds.append(measure_ms(timed.call, device, options.warmup_ms, options.rep_ms))
            except Exception as exc:
                if not options.keep_going:
                    raise
                timed.result.error = f"timing: {_error_line(exc)}"
        r += 1
    for timed in pending:
        if timed.result.error:
            timed.result.ms_rounds = []
        else:
            timed.result.ms = statistics.median(timed.result.ms_rounds)
            timed.result.rounds_spread = bench_measure.rounds_spread(timed.result.ms_rounds)
    return r


def _rounds_disagree(pending: list[Timed]) -> bool:
    spreads = (bench_measure.rounds_spread(t.result.ms_rounds) for t in pending if not t.result.error)
    return any(s is not None and s > bench_measure.ROUNDS_SPREAD_LIMIT for s in spreads)


def bench_eager(model, inputs) -> Timed:
    return _timed(BackendResult("eager", "eager", max_error=0.0), model, inputs)


@contextlib.contextmanager
def record_tuning() -> Iterator[list[str]]:
    """The lines the runtime logs to "pipec.tuning" (at INFO) while the block runs."""
    lines: list[str] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    log = logging.getLogger("pipec.tuning")
    handler, level = Recorder(logging.INFO), log.level
    log.addHandler(handler)
    if not log.isEnabledFor(logging.INFO):
        log.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def bench_pipec(model, fresh_model, inputs, expected, device: str, options: BenchOptions, name: str,
                opts: CompileOptions | None = None, backend: str = "pipec") -> Timed:
    """pipec (with `opts`, default `options.pipec`) compiled cold and checked; its warm compile (of
    `fresh_model`) is `Timed.warm`. `backend` names the row ("pipec", "pipec-reduce-overhead")."""
    from .api import compile_with_session, report_from_session
    from .pipeline import Session
    from .profile import first_call

    opts = opts or options.pipec  # its compile cache (default: local) serves the warm compile
    label = f"pipec ({opts.fusion}, {opts.runtime})"
    result = BackendResult(backend, label)

    def make(m, session: Session):
        return compile_with_session(m, opts, session, name=name)[0]

    cold = Session()
    with record_tuning() as result.tuning, first_call(cold.profile):
        compiled, outputs = _cold_compile(result, lambda: make(model, cold), inputs, device)
    report = report_from_session(cold)
    result.kernels, result.extern_ops = report.kernel_count, len(report.extern_ops)
    result.compile_profile = report.compile_profile
    result.max_error = _check(label, outputs, expected, options)

    def warm():
        session = Session()
        _reset_dynamo()  # as _first_call(reset=True) would, before the window opens
        with first_call(session.profile):
            _, outputs, result.compile_warm_s = _first_call(lambda: make(fresh_model, session), inputs, device,
                                                            reset=False)
        result.cache_hits = session.cache_hits
        result.compile_profile_warm = session.profile.to_dict()
        _check(f"{label} (warm compile)", outputs, expected, options)
    return _timed(result, compiled, inputs, warm)


def bench_inductor(model, fresh_model, inputs, expected, device: str, options: BenchOptions, mode: str) -> Timed:
    """Inductor in `mode` compiled cold and checked; its warm compile is `Timed.warm`."""
    import torch
    from torch._inductor import metrics

    name = "inductor" if mode == "default" else f"inductor-{mode}"
    label = f"inductor ({mode})"
    result = BackendResult(name, label)

    def make(m):
        return torch.compile(m, mode=None if mode == "default" else mode)

    metrics.reset()
    compiled, outputs = _cold_compile(result, lambda: make(model), inputs, device)
    result.kernels = metrics.generated_kernel_count
    # Inductor is the reference, not what is under test: outputs off eager's are its row's note
    # (`numerics`), and it is timed all the same
    result.max_error, mismatch = _compare(outputs, expected, options)
    if mismatch:
        result.numerics = f"{label} differs from eager: {mismatch}"

    def warm():
        _, outputs, result.compile_warm_s = _first_call(lambda: make(fresh_model), inputs, device, reset=True)
        mismatch = _compare(outputs, expected, options)[1]
        if mismatch and not result.numerics:  # its cold compile passed
            raise BenchMismatch(f"{label} (warm compile) differs from eager: {mismatch}")
    return _timed(result, compiled, inputs, warm)


# ---------------------------------------------------------------- the whole run


def versions() -> dict[str, str]:
    """The versions a benchmark or a report records: python, torch, triton and pipec."""
    import importlib.metadata
    import platform

    import torch
    import triton

    try:
        pipec_version = importlib.metadata.version("pipec")
    except importlib.metadata.PackageNotFoundError:
        pipec_version = "unknown"
    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
            "pipec": pipec_version}


def run_bench(model, inputs, name: str, options: BenchOptions, *,
              progress: Callable[[str], None] = lambda message: None,
              on_update: Callable[[BenchResult], None] = lambda result: None) -> BenchResult:
    """Check and time eager, pipec and Inductor on `inputs` (already on their device).

    Backends are compiled (cold) and checked in the order eager, pipec (its mode, then
    `pipec_modes`), Inductor modes (the slowest compiles last), then timed together
    (`time_rounds`), then their launches counted and peak memory measured, then each is compiled
    again from its caches (warm); `on_update` sees the result after each step. Raises
    BenchMismatch when a pipec backend's outputs differ from eager (Inductor's mismatch is noted
    as its row's `numerics`, and the row is timed); compile failures propagate; with `keep_going`
    both are recorded as the backend's `error` instead.
    """
    import torch

    # the caller's clock (`pipec bench` starts one before it loads the model file) goes on timing
    progress = progress if isinstance(progress, bench_measure.PhaseClock) else bench_measure.PhaseClock(progress)
    progress("setting up: copies of the model, eager's outputs, its bytes and FLOPs")
    tensors = tensors_in(inputs)
    device = str(tensors[0].device) if tensors else ("cuda" if torch.cuda.is_available() else "cpu")
    inductor = measures_inductor(options.inductor, device)
    modes = options.inductor_modes if inductor else ()
    pipecs = [("pipec", options.pipec)] + [(f"pipec-{mode}", opts) for mode, opts in options.pipec_modes]
    # every compiled backend gets its own copy for the cold compile and, when warm compiles are
    # timed, one for the warm compile (a real-size model's copies cost device memory and seconds)
    backends = [name for name, _ in pipecs] + list(modes)
    cold = {backend: bench_process.fresh_copy(model) for backend in backends}
    fresh = {backend: bench_process.fresh_copy(model) if options.warm else None for backend in backends}
    from .reference import lazy_float64_run, no_grad_call

    float64 = lazy_float64_run(model, inputs, no_grad_call)  # before the eager run: its starting state
    with torch.no_grad():
        expected = Expected(model(*inputs), float64)
    result = BenchResult(
        model=name, device=device,
        device_name=torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        timer=timer_label(device, options.warmup_ms, options.rep_ms, options.rounds, options.extra_rounds),
        interpreter=not device.startswith("cuda"), inputs=describe_inputs(inputs),
        bytes=io_bytes(model, inputs, expected.outputs), flops=count_flops(model, inputs),
        tolerance={"atol": options.atol, "rtol": options.rtol} if options.atol is not None else None,
        pipec_options={"fusion": options.pipec.fusion, "runtime": options.pipec.runtime,
                       "capture": options.pipec.capture, "codegen": options.pipec.codegen,
                       "extra": dict(options.pipec.extra)},  # `pipec bench --option`s
        versions=versions())
    caches = contextlib.nullcontext() if options.keep_caches else bench_process.private_caches()
    result.phase_seconds = progress.seconds
    with caches:
        bench_process.warm_up_process(device, options.pipec, inductor, progress)
        progress("tracing the model once (Dynamo alone), so no backend pays its first trace alone")
        result.first_trace_s = bench_process.trace_model_once(model, inputs)
        progress("measuring the copy bandwidth")
        result.copy_tb_per_s = copy_tb_per_s(result.bytes, device, options.warmup_ms, options.rep_ms)
        progress("eager")
        pending = [bench_eager(model, inputs)]
        result.backends.append(pending[-1].result)
        on_update(result)
        compiles = [(backend, lambda b=backend, o=opts: bench_pipec(cold[b], fresh[b], inputs, expected, device,
                                                                   options, name, o, b))
                    for backend, opts in pipecs]
        compiles += [(f"inductor ({mode})", lambda m=mode: bench_inductor(cold[m], fresh[m], inputs, expected,
                                                                           device, options, m))
                     for mode in modes]
        for backend, compile_backend in compiles:
            progress(f"{backend}: compiling (cold)")
            before, pools_before = reserved_bytes(device), graph_pool_bytes(device)
            float64_before = _float64_bytes(expected) if before is not None else 0
            try:
                pending.append(compile_backend())
                if before is not None:
                    bench_measure.settle(pending[-1].call)
                after = reserved_bytes(device)
                if before is not None:
                    held = after - before - (_float64_bytes(expected) - float64_before)
                    pending[-1].result.held_mib = max(held, 0) / 2**20
                    pending[-1].result.held_pools_mib = max(graph_pool_bytes(device) - pools_before, 0) / 2**20
            except Exception as exc:
                failed = BackendResult(backend, backend, error=_error_line(exc))
                if not options.keep_going:
                    raise
                result.backends.append(failed)
                progress(f"{backend}: failed: {failed.error}")
                on_update(result)
                continue
            result.backends.append(pending[-1].result)
            on_update(result)
        load_start = bench_measure.load_average()
        result.rounds_run = time_rounds(pending, device, options, progress)
        result.load_average = {"start": load_start, "end": bench_measure.load_average(),
                               "cpus": bench_measure.usable_cpus()}
        result.timing_warnings = bench_measure.timing_warnings(result.load_average, result.backends)
        pending = [timed for timed in pending if not timed.result.error]  # keep_going: failed while timed
        on_update(result)
        # torch.profiler may leave Triton launch hooks set for the rest of the process, and a launch
        # with hooks takes Triton's full path (pipec's direct launchers step aside for the hooks):
        # launches are counted after every timing
        progress("counting each backend's launches (torch.profiler, after all timings)")
        for timed in pending:
            timed.result.launches = count_launches(timed.call, device)
        progress("measuring each backend's peak memory")
        for timed in pending:
            timed.result.peak_mib = peak_memory_mib(timed.call, device)
        for timed in pending[1:] if options.warm else ():
            progress(f"{timed.result.label}: compiling again (warm)")
            try:
                timed.warm()
            except Exception as exc:
                if not options.keep_going:
                    raise
                timed.result.error = f"warm compile: {_error_line(exc)}"
            on_update(result)
        torch._dynamo.reset()
    progress.stop()
    return result


def reference_off_eager(row: BackendResult) -> bool:
    """An Inductor row whose outputs differed from eager (ResNet-50 in bf16 on the H200: 1.6% of
    the logits): timed, with its `numerics` note, and not fatal: pipec's figures beside it still hold."""
    return row.is_inductor and row.numerics is not None


def _error_line(exc: BaseException) -> str:
    """One line saying why a backend failed: a pipec error found in the chain, else the exception's first line."""
    from .errors import find_pipec_error

    if isinstance(exc, BenchMismatch):
        return str(exc)
    found = find_pipec_error(exc)
    if found is not None:
        return " ".join(str(found).split("\n")[0].split())
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


__all__ = ["BenchMismatch", "BenchOptions", "BenchResult", "BackendResult", "reference_off_eager", "run_bench", "bench_table", "profile_table",
           "io_bytes", "count_flops", "cpu_median_ms", "measure_ms", "peak_memory_mib", "reserved_bytes", "write_json"]
