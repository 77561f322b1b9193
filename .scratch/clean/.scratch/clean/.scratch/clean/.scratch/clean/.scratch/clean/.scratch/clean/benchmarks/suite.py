"""Issue 6's benchmark suite: eager vs TorchInductor vs pipec on the H200, one results file.

    python benchmarks/suite.py --out results.json                 # default Inductor only (~5 min)
    python benchmarks/suite.py --out results.json --max-autotune  # also max-autotune-no-cudagraphs (slow)
    python benchmarks/suite.py --out r.json --cases softmax_bf16,layer_norm_bf16 --budget 120

Every case is a model file under benchmarks/models/ run by `pipec bench` (the same code as
`pipec bench benchmarks/models/CASE.py`), each in its own process: a case gets a fresh GPU
memory pool, empty compile caches and a hard time budget (--budget, seconds; past it the
case is stopped and what it measured so far is kept). The results file holds every case's
full `pipec bench` JSON plus the issue's targets; the summary table puts each target next
to the measured value: met, or missed by how much. Needs CUDA (without it the cases would
run their full-size inputs in Triton's interpreter).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MODELS = Path(__file__).resolve().parent / "models"
MAX_AUTOTUNE = "inductor-max-autotune-no-cudagraphs"


# ---------------------------------------------------------------- targets (issue 6's table)


@dataclass(frozen=True)
class Target:
    """One claim of the issue: `measure(bench)` -> (value, detail); met when value >= or <= goal."""
    what: str  # how the target reads in the table, e.g. ">= 3.4 TB/s"
    goal: float
    higher_is_better: bool
    measure: Callable[[dict], tuple[float | None, str]]

    def judge(self, bench: dict) -> dict:
        value, detail = self.measure(bench)
        if value is None:
            return {"target": self.what, "measured": detail or "not measured", "value": None, "met": None,
                    "verdict": "not measured"}
        met = value >= self.goal if self.higher_is_better else value <= self.goal
        gap = (1 - value / self.goal) if self.higher_is_better else (value / self.goal - 1)
        verdict = f"met ({-gap:.1%} margin)" if met else f"missed by {gap:.1%}"
        return {"target": self.what, "measured": detail, "value": value, "met": met, "verdict": verdict}


def _backend(bench: dict, name: str) -> dict | None:
    return next((b for b in bench.get("backends", []) if b["name"] == name and b.get("ms")), None)


def _best_inductor(bench: dict) -> dict | None:
    return _backend(bench, bench["best_inductor"]) if bench.get("best_inductor") else None


def pipec_tbps(bench: dict) -> tuple[float | None, str]:
    p = _backend(bench, "pipec")
    if p is None:
        return None, ""
    copy = f", {p['fraction_of_copy']:.0%} of copy" if p.get("fraction_of_copy") else ""
    return p["tb_per_s"], f"{p['tb_per_s']:.2f} TB/s{copy}"


def pipec_ms(bench: dict) -> tuple[float | None, str]:
    p = _backend(bench, "pipec")
    return (p["ms"], f"{p['ms']:.3f} ms") if p else (None, "")


def pipec_vs_best_inductor(bench: dict) -> tuple[float | None, str]:
    """Inductor's best time / pipec's time (> 1: pipec faster); the same ratio as bandwidth."""
    p, best = _backend(bench, "pipec"), _best_inductor(bench)
    if p is None or best is None:
        return None, ""
    return best["ms"] / p["ms"], f"{best['ms'] / p['ms']:.3f}× ({p['ms']:.3f} vs {best['ms']:.3f} ms, {best['label']})"


def compile_vs_max_autotune(issue_seconds: float) -> Callable[[dict], tuple[float | None, str]]:
    """pipec's cold compile / Inductor max-autotune's (measured here, else the issue's figure)."""
    def measure(bench: dict) -> tuple[float | None, str]:
        p, mat = _backend(bench, "pipec"), _backend(bench, MAX_AUTOTUNE)
        if p is None:
            return None, ""
        ref, where = (mat["compile_cold_s"], "measured") if mat else (issue_seconds, "issue's figure")
        return p["compile_cold_s"] / ref, f"{p['compile_cold_s']:.1f} s vs {ref:.1f} s ({where})"
    return measure


@dataclass(frozen=True)
class Case:
    name: str  # benchmarks/models/NAME.py
    what: str
    targets: tuple[Target, ...]


CASES: tuple[Case, ...] = (
    Case("pointwise_fp32", "fp32 pointwise chain, 3 × 2^26 (gelu, sigmoid, mul, add)",
         (Target("≥ 0.97 × Inductor", 0.97, True, pipec_vs_best_inductor),)),
    Case("softmax_bf16", "softmax bf16 8192 × 8192, last dim",
         (Target("≥ 3.4 TB/s", 3.4, True, pipec_tbps),)),
    Case("layer_norm_bf16", "layer_norm bf16 16384 × 4096",
         (Target("≥ 3.9 TB/s", 3.9, True, pipec_tbps),)),
    Case("mlp_bf16", "Linear → GELU → Linear bf16 8192×2048 → 8192 → 2048",
         (Target("≤ 0.80 ms", 0.80, False, pipec_ms),
          Target("compile ≤ ¼ max-autotune", 0.25, False, compile_vs_max_autotune(48.0)))),
    Case("gpt2_block_bf16", "GPT-2 pre-LN block bf16, 8 × 1024 tokens, width 768",
         (Target("≤ best Inductor", 1.0, True, pipec_vs_best_inductor),
          Target("compile ≤ ¼ max-autotune", 0.25, False, compile_vs_max_autotune(83.0)))),
)


# ---------------------------------------------------------------- running one case


def run_case(case: Case, args: argparse.Namespace, workdir: Path) -> dict:
    """`pipec bench` on the case's model file in a child process, within the time budget."""
    part = workdir / f"{case.name}.json"
    cmd = [sys.executable, "-m", "pipec", "bench", str(MODELS / f"{case.name}.py"), "-o", str(part),
           "--warmup", str(args.warmup), "--rep", str(args.rep), "--fusion", args.fusion]
    if args.max_autotune:
        cmd += ["--inductor-mode", "max-autotune-no-cudagraphs"]
    if args.smoke:
        cmd += ["--inputs", "small_inputs", "--dtype", "float32", "--device", "cpu"]
    print(f"\n=== {case.name}: {case.what}  (budget {args.budget:.0f} s)", flush=True)
    start = time.perf_counter()
    # its own session: on timeout the whole group goes (Inductor's compile workers included)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=args.budget)
        status = "ok" if proc.returncode == 0 else ("mismatch" if "differs from eager" in err else "failed")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        status = "timed out"
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    bench = json.loads(part.read_text()) if part.exists() else {}
    record = {"case": case.name, "what": case.what, "status": status, "seconds": time.perf_counter() - start,
              "error": errors[-1] if errors else (f"stopped after {args.budget:.0f} s" if status == "timed out"
                                                  else None),
              "bench": bench, "targets": [t.judge(bench) for t in case.targets] if bench else []}
    if status != "ok":
        print(f"{case.name}: {status}: {record['error'] or err.strip()[-500:]}", flush=True)
    return record


# ---------------------------------------------------------------- the summary


def _kernels(b: dict | None) -> str:
    if b is None or b.get("kernels") is None:
        return "-"
    text = str(b["kernels"]) + (f"+{b['extern_ops']}x" if b.get("extern_ops") else "")
    return text + (f" ({b['launches']} launches)" if b.get("launches") is not None else "")


def summary_table(records: list[dict]):
    """One row per target; the case's numbers on its first row. Errors are listed below it."""
    from rich.table import Table

    table = Table(title="pipec · issue 6 suite (ratios from this run; targets from the issue)",
                  title_justify="left", caption="kernels: Triton kernels generated (+Nx extern library calls); "
                  "launches: GPU kernels per call. compile: first call, s (cold / warm).", caption_justify="left")
    for col in ("case", "status", "ms: pipec / best Inductor / eager", "pipec TB/s", "target", "measured", "verdict",
                "compile pipec", "compile Inductor", "kernels pipec", "kernels Inductor", "max err pipec"):
        table.add_column(col)
    for r in records:
        bench = r["bench"]
        p, best, eager = _backend(bench, "pipec"), _best_inductor(bench), _backend(bench, "eager")
        times = " / ".join(f"{b['ms']:.4f}" if b else "-" for b in (p, best, eager))
        tbps = (f"{p['tb_per_s']:.2f}" + (f" ({p['fraction_of_copy']:.0%} copy)" if p.get("fraction_of_copy")
                                          else "")) if p else "-"
        inductor = [b for b in bench.get("backends", []) if b["name"].startswith("inductor")
                    and b.get("compile_cold_s") is not None]
        facts = [
            f"{p['compile_cold_s']:.1f} / {p['compile_warm_s']:.1f}" if p else "-",
            ", ".join(f"{b['compile_cold_s']:.0f} / {b['compile_warm_s']:.0f}" for b in inductor) or "-",
            _kernels(p), _kernels(best), f"{p['max_error']:.2g}" if p else "-",
        ]
        targets = r["targets"] or [{"target": "-", "measured": "-", "verdict": "-"}]
        for i, t in enumerate(targets):
            first = i == 0
            table.add_row(r["case"] if first else "", r["status"] if first else "", times if first else "",
                          tbps if first else "", t["target"], t["measured"], t["verdict"],
                          *(facts if first else [""] * len(facts)))
    return table


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the results file (JSON)")
    parser.add_argument("--cases", help=f"comma-separated subset of: {', '.join(c.name for c in CASES)}")
    parser.add_argument("--max-autotune", action="store_true",
                        help="also measure Inductor max-autotune-no-cudagraphs (about a minute of compiling per case)")
    parser.add_argument("--budget", type=float, help="seconds per case (default 240, 600 with --max-autotune)")
    parser.add_argument("--warmup", type=float, default=25.0, help="do_bench warm-up, ms")
    parser.add_argument("--rep", type=float, default=100.0, help="do_bench measuring time, ms")
    parser.add_argument("--fusion", default="default", help="pipec fusion policy")
    parser.add_argument("--smoke", action="store_true", help="a CPU smoke test of the suite itself: each "
                        "model's small_inputs in float32, kernels in Triton's interpreter (no timing worth reading)")
    args = parser.parse_args()
    args.budget = args.budget or (600.0 if args.max_autotune else 240.0)
    names = {c.name for c in CASES}
    chosen = [c.strip() for c in args.cases.split(",")] if args.cases else [c.name for c in CASES]
    unknown = [c for c in chosen if c not in names]
    if unknown:
        print(f"error: unknown case {unknown[0]!r} (cases: {', '.join(sorted(names))})", file=sys.stderr)
        return 2
    if not args.smoke and not _has_cuda():
        print("error: the suite needs CUDA (try `pipec bench benchmarks/models/CASE.py --inputs small_inputs "
              "--device cpu` for a CPU smoke test)", file=sys.stderr)
        return 2

    started, clock = datetime.datetime.now(datetime.UTC), time.perf_counter()
    records = []
    with tempfile.TemporaryDirectory(prefix="pipec-suite-") as workdir:
        for case in CASES:
            if case.name in chosen:
                records.append(run_case(case, args, Path(workdir)))
                write_results(args, records, started, clock)  # after each case: an interrupted run keeps them
    from rich.console import Console

    Console(width=220 if not sys.stdout.isatty() else None).print(summary_table(records))
    for r in records:
        if r["status"] != "ok":
            print(f"{r['case']}: {r['status']}: {r['error']}")
    print(f"results: {args.out}  ({time.perf_counter() - clock:.0f} s in all)")
    return 0 if all(r["status"] == "ok" for r in records) else 1


def write_results(args: argparse.Namespace, records: list[dict], started, clock: float) -> None:
    first = next((r["bench"] for r in records if r["bench"]), {})
    Path(args.out).write_text(json.dumps({
        "suite": "pipec issue 6", "started": started.isoformat(), "seconds": time.perf_counter() - clock,
        "host": platform.node(), "device": first.get("device_name"), "versions": first.get("versions"),
        "options": {"smoke": args.smoke, "max_autotune": args.max_autotune, "budget_s": args.budget, "warmup_ms": args.warmup,
                    "rep_ms": args.rep, "fusion": args.fusion},
        "cases": records,
    }, indent=2))


if __name__ == "__main__":
    sys.exit(main())
