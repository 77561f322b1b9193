"""What `pipec bench` measures of one call, backend by backend: the bytes it moves and the FLOPs
it computes, its time (do_bench on CUDA, a perf_counter loop on the CPU), its GPU launches and its
peak memory. bench.py runs the backends and makes the table; these are its instruments.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any


# ---------------------------------------------------------------- where a bench's own time goes


class PhaseClock:
    """Wall seconds of each phase of a bench run, a phase being what lies between two progress
    messages (warm-up, first trace, each cold compile, the timing rounds, ...). The suite's cases
    take ~45-140 s each on a GPU lease of 30 minutes; this says which part to make cheaper."""

    def __init__(self, forward: Callable[[str], None]):
        self._forward = forward
        self.seconds: dict[str, float] = {}
        self._phase: str | None = None
        self._start = time.perf_counter()

    def __call__(self, message: str) -> None:
        self.stop()
        self._phase, self._start = message, time.perf_counter()
        self._forward(message)

    def stop(self) -> None:
        """Close the running phase (a repeated message adds to its total)."""
        if self._phase is not None:
            elapsed = time.perf_counter() - self._start
            self.seconds[self._phase] = round(self.seconds.get(self._phase, 0.0) + elapsed, 3)
            self._phase = None


def torch_compile_seconds() -> dict[str, float]:
    """torch's own compile-time counters so far in this process, summed per name
    (`torch._dynamo.utils.compilation_time_metrics`: Dynamo's trace, the backend call, guards,
    and Inductor's phases; the names vary between torch versions). Empty where torch has none."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return {}
    return {name: sum(times) for name, times in compilation_time_metrics.items()}


def torch_compile_seconds_since(before: dict[str, float], at_least: float = 0.01) -> dict[str, float]:
    """The counters that grew by `at_least` seconds since `before`: one compile's split, the same
    for every backend, so Inductor's row shows where its compile went as pipec's profile does."""
    grown = {name: total - before.get(name, 0.0) for name, total in torch_compile_seconds().items()}
    return {name: round(seconds, 3) for name, seconds in grown.items() if seconds >= at_least}


# ---------------------------------------------------------------- what one call moves and computes


def tensors_in(value) -> list:
    """The tensors in a nest of lists, tuples and dicts."""
    import torch
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def io_bytes(model, inputs, outputs) -> int:
    """Bytes of inputs, parameters, buffers and outputs, each storage once (see the module docstring)."""
    import torch

    tensors = tensors_in(inputs) + tensors_in(outputs)
    if isinstance(model, torch.nn.Module):
        tensors += list(model.parameters()) + list(model.buffers())
    seen: dict[tuple[str, int], int] = {}
    for t in tensors:
        key = (str(t.device), t.untyped_storage().data_ptr())
        seen[key] = max(seen.get(key, 0), t.numel() * t.element_size())
    return sum(seen.values())


def count_flops(model, inputs) -> int | None:
    """FLOPs of one eager call (matmuls, convolutions, attention), by FlopCounterMode; None when
    the counter cannot count the model (torch 2.11's refuses grouped-query attention's shapes)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), counter:
            model(*inputs)
    except Exception:  # noqa: BLE001 - the count is a figure of the table, never a reason to fail
        return None
    return int(counter.get_total_flops())


def describe_inputs(inputs) -> list[str]:
    short = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64"}
    out = []
    for t in tensors_in(inputs):
        dtype = str(t.dtype).removeprefix("torch.")
        out.append(f"{short.get(dtype, dtype)}[{', '.join(str(s) for s in t.shape)}]")
    return out


# ---------------------------------------------------------------- timing


def synchronize(device: str) -> None:
    """Wait for the GPU (CUDA devices only), so that a host clock measures finished work."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def cpu_median_ms(fn: Callable[[], Any], warmup_ms: float, rep_ms: float, min_calls: int = 3) -> float:
    """Median wall time per call (ms): calls for `warmup_ms`, then at least `min_calls` for `rep_ms`."""
    fn()
    end = time.perf_counter() + warmup_ms / 1e3
    while time.perf_counter() < end:
        fn()
    times: list[float] = []
    end = time.perf_counter() + rep_ms / 1e3
    while len(times) < min_calls or time.perf_counter() < end:
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def measure_ms(fn: Callable[[], Any], device: str, warmup_ms: float, rep_ms: float) -> float:
    """Median time of one call (ms): triton.testing.do_bench on CUDA, a perf_counter loop on the CPU."""
    if device.startswith("cuda"):
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    return cpu_median_ms(fn, warmup_ms, rep_ms)


def timer_label(device: str, warmup_ms: float, rep_ms: float, rounds: int = 1, extra_rounds: int = 0) -> str:
    each = f"warmup {warmup_ms:g} ms, rep {rep_ms:g} ms"
    rounds_text = f", median of {rounds} rounds" if rounds > 1 else ""
    if extra_rounds > 0:
        rounds_text += (f" (up to {extra_rounds} more while a backend's rounds disagree by more than "
                        f"{ROUNDS_SPREAD_LIMIT:.0%})")
    if device.startswith("cuda"):
        return f"triton.testing.do_bench median ({each}){rounds_text}"
    return f"CPU wall time, time.perf_counter median ({each}){rounds_text}"


# ---------------------------------------------------------------- can the numbers be trusted

# a backend's timing rounds disagreeing by more than this (slowest vs fastest) say the machine
# changed under the benchmark: other work, clocks, thermal state
ROUNDS_SPREAD_LIMIT = 0.10


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: a container's share), else os.cpu_count()."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average (runnable and waiting tasks); None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def rounds_spread(ms_rounds: list[float]) -> float | None:
    """How far a backend's timing rounds disagree: (slowest - fastest) / fastest; None under 2 rounds."""
    if len(ms_rounds) < 2 or min(ms_rounds) <= 0:
        return None
    return (max(ms_rounds) - min(ms_rounds)) / min(ms_rounds)


def timing_warnings(load: dict, backends) -> list[str]:
    """Why the timings may not be trusted (empty: no reason found).

    `load`: {"start", "end": the load average when the timing rounds started and ended, "cpus"}.
    A load above the CPU count at both ends means other processes competed for the CPUs all
    along (one reading alone may be the benchmark's own compile, still in the 1-minute average).
    `backends`: BackendResults whose `rounds_spread` is set."""
    out = []
    start, end, cpus = load.get("start"), load.get("end"), load.get("cpus") or 1
    if start is not None and end is not None and min(start, end) > cpus:
        out.append(f"load average {max(start, end):.1f} on {cpus} CPUs: other processes compete with the "
                   "benchmark (host overhead and CPU times are inflated)")
    for b in backends:
        if b.rounds_spread is not None and b.rounds_spread > ROUNDS_SPREAD_LIMIT:
            rounds = ", ".join(f"{ms:.4g}" for ms in b.ms_rounds)
            out.append(f"{b.label}: timing rounds disagree by {b.rounds_spread:.0%} ({rounds} ms)")
    return out


def copy_tb_per_s(nbytes: int, device: str, warmup_ms: float, rep_ms: float) -> float | None:
    """TB/s of a device-to-device copy moving `nbytes` (half read, half written); CUDA only."""
    import torch

    if not device.startswith("cuda") or nbytes < 2:
        return None
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = measure_ms(lambda: dst.copy_(src), device, warmup_ms, rep_ms)
    return 2 * src.numel() / (ms * 1e-3) / 1e12


def count_launches(fn: Callable[[], Any], device: str) -> int | None:
    """GPU kernels launched by one call (torch.profiler; memcpy/memset not counted); None off CUDA."""
    if not device.startswith("cuda"):
        return None
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset")))
    except Exception:  # a profiler that cannot start (CUPTI unavailable) costs the count, not the run
        return None


SETTLE_CALLS = 3


def settle(call: Callable[[], Any]) -> None:
    """A few calls as a loop `y = model(x)` makes them, each holding the last result while the next
    runs: a backend that records CUDA Graphs lazily (Inductor's trees record at the second call;
    pipec records a second variant while the first's outputs are held) then holds what it will
    hold from then on, and its held memory compares with one that records at once."""
    out = None
    for _ in range(SETTLE_CALLS):
        out = call()
    del out


def peak_memory_mib(fn: Callable[[], Any], device: str) -> float | None:
    """Peak GPU memory (MiB) of one call above the memory allocated before it; None off CUDA."""
    if not device.startswith("cuda"):
        return None
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(device)
    at_rest = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated(device) - at_rest) / 2**20


def graph_pool_bytes(device: str) -> int | None:
    """Bytes of the caching allocator's segments in CUDA Graph pools (every pool but the caller's
    own: pipec's graphs', Inductor's trees'), free blocks inside them included; None off CUDA. Read
    after `reserved_bytes`, whose `empty_cache` hands the caller's fully free segments back."""
    if not device.startswith("cuda"):
        return None
    import torch

    return sum(s["total_size"] for s in torch.cuda.memory_snapshot()
               if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0))


def reserved_bytes(device: str) -> int | None:
    """Bytes the CUDA caching allocator holds once its unused cached blocks are released; None off CUDA."""
    if not device.startswith("cuda"):
        return None
    import gc

    import torch

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved(device)
