"""What `pipec bench` reports: one row per backend (`BackendResult`), the run around them
(`BenchResult`, with the ratios and rates derived from the times), and its JSON file."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class BackendResult:
    name: str  # "eager", "pipec", "inductor", "inductor-max-autotune-no-cudagraphs"
    label: str
    ms: float | None = None  # the median of `ms_rounds`
    ms_rounds: list[float] = field(default_factory=list)  # one median per timing round
    rounds_spread: float | None = None  # (slowest - fastest) / fastest round: > 10% is warned about
    max_error: float | None = None
    kernels: int | None = None
    extern_ops: int | None = None
    launches: int | None = None
    peak_mib: float | None = None  # peak memory of one call above the memory at rest (CUDA only)
    held_mib: float | None = None  # memory the compiled backend keeps between calls (CUDA only)
    held_pools_mib: float | None = None  # of held_mib, the CUDA Graph pools' (the rest: the caller's pool)
    compile_cold_s: float | None = None
    compile_warm_s: float | None = None
    cache_hits: dict[str, int] | None = None  # pipec's warm compile
    # pipec's cold and warm compiles: where the first call's time went (ExplainReport.compile_profile:
    # {"wall_s", "seconds": {part: s, ..., "other": s}, "counts": {...}})
    compile_profile: dict | None = None
    compile_profile_warm: dict | None = None
    # torch's compile-time counters over the cold compile, every backend (bench_measure.torch_compile_seconds)
    torch_compile_phases: dict[str, float] | None = None
    # pipec's cold compile: what autotuning picked, one line per kernel and choice group timed
    # (the runtime's "pipec.tuning" log: every config's time, each choice group's alternatives)
    tuning: list[str] | None = None
    error: str | None = None  # keep_going: why this backend has no time (compile error, mismatch)
    # an Inductor row whose outputs differ from eager's beyond the tolerances (and from float64 more
    # than eager's do): timed all the same, with this note, so the table still has its time beside
    # pipec's (ResNet-50 in bf16: Inductor off on 1.6% of the logits, H200 and H100)
    numerics: str | None = None

    @property
    def is_inductor(self) -> bool:
        return self.name.startswith("inductor")


@dataclass
class BenchResult:
    model: str
    device: str
    device_name: str
    timer: str
    interpreter: bool  # pipec's kernels ran in Triton's interpreter
    inputs: list[str]
    bytes: int
    flops: int | None
    tolerance: dict[str, float] | None
    pipec_options: dict[str, Any]
    versions: dict[str, str]
    copy_tb_per_s: float | None = None
    # seconds of the Dynamo-only trace of the model before any timed compile (`bench_process.trace_model_once`)
    first_trace_s: float | None = None
    rounds_run: int | None = None  # timing rounds run: `rounds`, plus any run while rounds disagreed
    # wall seconds of each phase of the run, by its progress message (bench_measure.PhaseClock)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    backends: list[BackendResult] = field(default_factory=list)
    # the 1-minute load average when the timing rounds started and ended, and the usable CPUs
    load_average: dict[str, float | int | None] = field(default_factory=dict)
    # why the timings may not be trusted (bench_measure.timing_warnings); empty: no reason found
    timing_warnings: list[str] = field(default_factory=list)
    # the run is over: nothing more will be written (a harness may stop the process from here on)
    complete: bool = False

    def backend(self, name: str) -> BackendResult | None:
        return next((b for b in self.backends if b.name == name), None)

    def best_inductor(self) -> BackendResult | None:
        timed = [b for b in self.backends if b.is_inductor and b.ms]
        return min(timed, key=lambda b: b.ms) if timed else None

    def derived(self, b: BackendResult) -> dict[str, float | None]:
        """Speedups (> 1: faster than the reference), TB/s, fraction of copy bandwidth, TFLOP/s."""
        eager, best = self.backend("eager"), self.best_inductor()
        if not b.ms:
            return {"speedup_vs_eager": None, "speedup_vs_inductor": None, "tb_per_s": None,
                    "fraction_of_copy": None, "tflop_per_s": None}
        tbps = self.bytes / (b.ms * 1e-3) / 1e12
        return {
            "speedup_vs_eager": eager.ms / b.ms if eager and eager.ms else None,
            "speedup_vs_inductor": best.ms / b.ms if best else None,
            "tb_per_s": tbps,
            "fraction_of_copy": tbps / self.copy_tb_per_s if self.copy_tb_per_s else None,
            "tflop_per_s": self.flops / (b.ms * 1e-3) / 1e12 if self.flops else None,
        }

    def to_dict(self) -> dict:
        out = asdict(self)
        out["backends"] = [{**asdict(b), **self.derived(b)} for b in self.backends]
        best = self.best_inductor()
        out["best_inductor"] = best.name if best else None
        return out


def write_json(result: BenchResult, path: str) -> None:
    """Write the result as JSON, atomically (a reader never sees half a file)."""
    import json

    from pipec_runtime_cudagraph.files import atomic_write

    atomic_write(path, json.dumps(result.to_dict(), indent=2).encode())
