"""Issue 19's real-model suite: every transformers model of tests/real_models/hf_models.py at its
real size through `pipec bench`, one results table (markdown and JSON).

    python benchmarks/real_models.py --out results.json             # every real case, on the GPU
    python benchmarks/real_models.py --out r.json --cases bert,gpt2 --budget 600
    python benchmarks/real_models.py --out smoke.json --size tiny --device cpu   # CPU smoke test
    python benchmarks/real_models.py --out d.json --suite diffusers --cases sd15_unet,sdxl_unet,sd3_medium

Each case is `pipec bench benchmarks/models/hf_model.py` (PIPEC_HF_MODEL=case) in its own
process, with a hard time budget (--budget seconds; past it the case is stopped): eager,
Inductor default and reduce-overhead, pipec default and reduce-overhead, all in one process,
each checked against eager before it is timed (`--keep-going`: a backend that fails keeps
its row with the error and the others are still timed). When the process dies (a CUDA error
kills every backend of it), the case runs again split in two processes, pipec
reduce-overhead apart, and the table says so. A case that fails in every way still has its
row, with the reason.

The table: each backend's time; pipec's ratio to eager and to Inductor in the same mode
(> 1: pipec is faster); compile times (cold: empty caches); max error vs eager; peak memory
of one call above the memory at rest and the memory each compiled backend holds between calls
(CUDA only). Warm compiles (from the caches) are skipped unless --warm: they are not in the
table and cost a compile per backend. Results are written after every case (an interrupted
run keeps them): --out (JSON) and the same path with .md.

A GPU lease allows 10 minutes a command, and the whole suite takes about 20: a run split over
several commands should waste none of them on a case cut off at the command's limit.

    python benchmarks/real_models.py --out a.json --deadline 560 --expect benchmarks/results/real_models_h100_s43.json
    python benchmarks/real_models.py --out b.json --deadline 560 --expect ... --skip-done a.json
    python benchmarks/real_models.py --out all.json --combine a.json b.json

--deadline S: the run starts a case only when the case is expected to end within S seconds of the
run's start (its `seconds` in the --expect results, scaled by this host's pace so far, with a margin;
without earlier seconds, while a minute is left), so it skips a case that would not fit and goes on
to shorter ones; every case's budget also ends at the deadline. The cases left are printed, and
kept in the JSON (`not_started`). --skip-done runs none of the cases that finished "ok" in earlier
results. With --cases, cases run in that order.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL_FILE = REPO / "benchmarks" / "models" / "hf_model.py"
BACKENDS = ("eager", "inductor", "inductor-reduce-overhead", "pipec", "pipec-reduce-overhead")
LABELS = {"eager": "eager", "inductor": "Inductor", "inductor-reduce-overhead": "Inductor RO", "pipec": "pipec",
          "pipec-reduce-overhead": "pipec RO"}


def registry(file: str = "hf_models.py"):
    """A registry of tests/real_models/ (imported by path: it is no package)."""
    import importlib.util

    name = f"pipec_bench_{file.removesuffix('.py')}"
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "real_models" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def all_cases(size: str, suite: str = "transformers") -> list[dict]:
    """Every case of `suite` (transformers, diffusers, all) at `size`: name, architecture, family,
    the published config, the inputs."""
    cases = []
    if suite in ("transformers", "all"):
        hf = registry()
        if size == "tiny":
            cases += [{"case": a.name, "arch": a.name, "family": a.family, "what": a.what,
                       "shape": _shape_text(a.tiny)} for a in hf.ARCHS]
        else:
            cases += [{"case": case, "arch": a.name, "family": a.family, "what": a.what, "shape": _shape_text(shape)}
                      for case, (a, shape) in hf.real_cases().items()]
    if suite in ("diffusers", "all"):  # the denoisers and a VAE decoder (diffusers_models.py)
        cases += [{"case": c.name, "arch": c.name, "family": "diffusion", "what": c.what,
                   "shape": "tiny float32" if size == "tiny" else "bfloat16"} for c in registry("diffusers_models.py").CASES]
    return cases


def _shape_text(shape) -> str:
    length = f"{shape.length}" if shape.length else ""
    target = f" → {shape.target_length}" if shape.target_length else ""
    dims = f"{shape.batch} × {length}" if length else f"{shape.batch}"
    return f"{dims}{target} {str(shape.dtype).removeprefix('torch.')}"


# ---------------------------------------------------------------- running one case


def bench_command(args: argparse.Namespace, part: Path, pipec_modes: list[str], inductor_modes: list[str],
                  inductor: bool) -> list[str]:
    cmd = [sys.executable, "-m", "pipec", "bench", str(MODEL_FILE), "-o", str(part), "--keep-going",
           "--warmup", str(args.warmup), "--rep", str(args.rep), "--rounds", str(args.rounds),
           "--extra-rounds", str(args.extra_rounds), *(f"--option={o}" for o in args.pipec_option),
           "--fusion", args.fusion, "--device", args.device]
    cmd += ["--inductor"] if inductor else ["--no-inductor"]
    cmd += ["--warm"] if args.warm else ["--no-warm"]
    for mode in inductor_modes:
        cmd += ["--inductor-mode", mode]
    if pipec_modes and pipec_modes[0] != "default":
        cmd += ["--mode", pipec_modes[0]]
    for mode in pipec_modes[1:]:
        cmd += ["--pipec-mode", mode]
    if args.atol is not None:
        cmd += ["--atol", str(args.atol), "--rtol", str(args.rtol)]
    return cmd


# Seconds a child gets to exit by itself once its results say `complete`. Its exit (tables printed,
# compile workers stopped, CUDA torn down) took 3.1-3.7 s a case in session 46's lease: time no
# result needs, so past this the child's process group is killed.
EXIT_GRACE_S = 0.5


def run_bench_process(cmd: list[str], env: dict, budget: float, part: Path) -> dict:
    """One `pipec bench` child within `budget` seconds: its JSON (as far as it got), exit, error.
    A child whose JSON says `complete` is not waited for past EXIT_GRACE_S: its exit status and
    error are then what its results say (1 and bench's one line when a backend failed)."""
    start = time.perf_counter()
    err_path = part.with_suffix(".stderr")
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen(cmd, stderr=err_file, stdout=subprocess.DEVNULL, text=True, env=env,
                                start_new_session=True)  # killed as a group: its compile workers too
        exit_status, reaped, complete_at = None, False, None
        while exit_status is None:
            try:
                exit_status = proc.wait(timeout=0.25)
            except subprocess.TimeoutExpired:
                now = time.perf_counter()
                if now - start > budget:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    exit_status = "timed out"
                elif complete_at is None:
                    complete_at = now if _complete(part) else None
                elif now - complete_at > EXIT_GRACE_S:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    exit_status, reaped = "reaped", True
    err = err_path.read_text(errors="replace")
    bench = json.loads(part.read_text()) if part.exists() else {}
    seconds = time.perf_counter() - start
    since_last_write = time.time() - part.stat().st_mtime if part.exists() else None
    if reaped:  # as `pipec bench` would have ended: exit 1 with one line where a backend failed
        failed = [b for b in bench.get("backends", []) if b.get("error")]
        exit_status = 1 if failed else 0
        err += f"\nerror: {bench.get('model')}: {len(failed)} backend(s) failed; {failed[0]['name']}: " \
               f"{failed[0]['error']}\n" if failed else ""
    errors = [ln.removeprefix("error: ") for ln in err.splitlines() if ln.startswith("error: ")]
    if exit_status == "timed out":
        error = f"stopped after {budget:.0f} s"
    elif errors:
        error = errors[-1]
    elif exit_status != 0:  # died without saying why in one line: a signal, a CUDA error's traceback
        tail = [ln.strip() for ln in err.strip().splitlines() if ln.strip()]
        error = f"exit {exit_status}: " + (tail[-1] if tail else "no output")
    else:
        error = None
    return {"bench": bench, "exit": exit_status, "error": error, "seconds": seconds, "command": cmd,
            "reaped": reaped, "outside_bench_s": outside_bench(bench, seconds, since_last_write)}


def _complete(part: Path) -> bool:
    """Whether the child's results file says its run is over (`pipec bench` writes it atomically)."""
    try:
        return bool(json.loads(part.read_text()).get("complete"))
    except (OSError, ValueError):
        return False


def outside_bench(bench: dict, seconds: float, after_last_write: float | None) -> dict | None:
    """The process's seconds that bench's phase clock does not see: before its first phase (the
    interpreter, imports) and after its results were last written (printing the tables, exiting:
    compile workers stopped, CUDA torn down). Session 44's lease: 22.5 s a case of ~86, both
    together; this splits them. None where the child wrote no phases."""
    phases = bench.get("phase_seconds") or {}
    if not phases or after_last_write is None:
        return None
    after = max(0.0, after_last_write)
    return {"start": round(max(0.0, seconds - sum(phases.values()) - after), 2), "exit": round(after, 2)}


def _rows(bench: dict) -> dict[str, dict]:
    return {b["name"]: b for b in bench.get("backends", [])}


def _poisoned(attempt: dict) -> bool:
    """The process died, or a CUDA error (which poisons every later call in the process) hit a backend."""
    if attempt["exit"] not in (0, 1, "timed out"):
        return True
    return any("CUDA error" in (row.get("error") or "") for row in attempt["bench"].get("backends", []))


def warm_imports() -> None:
    """Import what every case's process imports, once, before the first budget starts: a fresh
    machine's first import of torch, triton and transformers (bytecode compiled, files read from
    disk) took 20-30 s, which the first case's budget paid alone (session 14's bounds-checked run
    lost BERT so)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, triton, transformers, pipec"], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"imports warmed in {time.perf_counter() - start:.1f} s", flush=True)


def run_case(case: dict, args: argparse.Namespace, workdir: Path) -> dict:
    env = {**os.environ, "PIPEC_HF_MODEL": case["case"], "PIPEC_HF_SIZE": args.size}
    inductor = args.inductor if args.inductor is not None else args.device.startswith("cuda")
    ro = args.reduce_overhead
    inductor_modes = ["reduce-overhead"] if inductor and ro else []
    print(f"\n=== {case['case']}: {case['what']}, {case['shape']}  (budget {args.budget:.0f} s)", flush=True)

    def attempt(tag: str, pipec_modes: list[str], with_inductor: bool) -> dict:
        part = workdir / f"{case['case']}{tag}.json"
        modes = inductor_modes if with_inductor else []
        return run_bench_process(bench_command(args, part, pipec_modes, modes, with_inductor), env, args.budget, part)

    pipec_default = args.pipec_default or not ro
    first = (["default"] if pipec_default else []) + (["reduce-overhead"] if ro else [])
    attempts = [attempt("", first, inductor)]
    rows = _rows(attempts[0]["bench"])
    if not pipec_default and "pipec" in rows:  # reduce-overhead was the process's main pipec row
        rows["pipec-reduce-overhead"] = {**rows.pop("pipec"), "name": "pipec-reduce-overhead"}
    note = None
    if _poisoned(attempts[0]) and ro and pipec_default:
        # a CUDA error poisons every backend after it in the process: run again with pipec's
        # CUDA Graphs in a process of their own, so one crash does not cost the whole row
        note = f"split into two processes after: {attempts[0]['error']}"
        print(f"{case['case']}: {note}", flush=True)
        attempts += [attempt("-a", ["default"], inductor), attempt("-b", ["reduce-overhead"], False)]
        rows = _rows(attempts[1]["bench"])
        ro = _rows(attempts[2]["bench"]).get("pipec")
        if ro is not None:
            rows["pipec-reduce-overhead"] = {**ro, "name": "pipec-reduce-overhead"}
    bench = next((a["bench"] for a in attempts[len(attempts) > 1:] if a["bench"]), attempts[0]["bench"])
    errors = {name: row["error"] for name, row in rows.items() if row.get("error")}
    expected = [b for b in BACKENDS if (inductor or not b.startswith("inductor"))
                and (ro or not b.endswith("reduce-overhead")) and (pipec_default or b != "pipec")]
    missing = [b for b in expected if rows.get(b, {}).get("ms") is None]
    timed_out = any(a["exit"] == "timed out" for a in attempts)
    status = "ok" if not missing and not errors else ("timed out" if timed_out else "failed")
    error = next(iter(errors.values()), None) or next((a["error"] for a in attempts if a["error"]), None)
    if status == "ok" and timed_out:  # every backend was timed; the budget ran out in what comes after
        error = f"{error}, after every backend was timed (launch counts, memory or warm compiles missing)"
    record = {**case, "size": args.size, "status": status, "error": error, "errors": errors, "note": note,
              "missing": missing, "seconds": sum(a["seconds"] for a in attempts), "rows": rows,
              "bench": {k: v for k, v in bench.items() if k != "backends"},
              "attempts": [{k: a.get(k) for k in ("exit", "error", "seconds", "reaped", "outside_bench_s", "command")}
                           for a in attempts]}
    if status != "ok":
        print(f"{case['case']}: {status}: {error or 'missing ' + ', '.join(missing)}", flush=True)
        hint = budget_hint(record, args.budget)
        if hint:
            print(hint, flush=True)
    return record


def budget_hint(record: dict, budget: float) -> str | None:
    """What to do about a case the budget stopped before it timed any backend: every later case of
    the run may end the same way (session 38 spent a 10-minute GPU call on nine such cases, at a
    55 s budget where a real-size case with both modes needs 60-130 s on an H100)."""
    if record["status"] != "timed out" or any(row.get("ms") is not None for row in record["rows"].values()):
        return None
    compiled = sum(row.get("compile_cold_s") or 0.0 for row in record["rows"].values())
    return (f"  hint: --budget {budget:.0f} s stopped {record['case']} before any backend was timed "
            f"(its compiles so far: {compiled:.0f} s); a real-size case with both modes takes 60-130 s "
            "on an H100: raise --budget")


# ---------------------------------------------------------------- the table


def _ms(rows: dict, name: str) -> float | None:
    row = rows.get(name)
    return row.get("ms") if row else None


def _ratio(rows: dict, reference: str, name: str) -> float | None:
    """reference's time / name's time (> 1: `name` is faster)."""
    ref, ms = _ms(rows, reference), _ms(rows, name)
    return ref / ms if ref and ms else None


def _f(value, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _field(rows: dict, name: str, key: str, spec: str) -> str:
    row = rows.get(name)
    return _f(row.get(key) if row else None, spec)


def _held(rows: dict, name: str) -> str:
    """A backend's held MiB, with the CUDA Graph pools' share in parentheses where it has one."""
    row = rows.get(name) or {}
    pools = row.get("held_pools_mib")
    return _f(row.get("held_mib"), ".0f") + (f" ({pools:.0f})" if pools else "")


COLUMNS = ("case", "model", "inputs", "status",
           "eager ms", "Inductor ms", "Inductor RO ms", "pipec ms", "pipec RO ms",
           "pipec × eager", "pipec × Inductor", "pipec RO × Inductor RO",
           "compile s: pipec / RO / Inductor / RO",
           "max err: pipec / RO / Inductor",
           "peak MiB: eager / Inductor / RO / pipec / RO",
           "held MiB: Inductor / RO / pipec / RO",
           "pipec kernels", "error")


def _short(error: str | None, limit: int = 160) -> str:
    """An error for the table (the JSON keeps it whole)."""
    if not error:
        return ""
    return error if len(error) <= limit else error[:limit - 1] + "…"


def table_rows(records: list[dict]) -> list[list[str]]:
    out = []
    for r in records:
        rows = r["rows"]
        kernels = rows.get("pipec", {})
        kernel_text = "-" if kernels.get("kernels") is None else (
            f"{kernels['kernels']}" + (f" +{kernels['extern_ops']} extern" if kernels.get("extern_ops") else ""))
        error = "; ".join(f"{LABELS.get(n, n)}: {_short(e)}" for n, e in r["errors"].items()) or _short(r["error"])
        off = [f"{LABELS.get(n, n)} timed, but {_short(row['numerics'].split(' differs from eager: ', 1)[-1])}"
               for n, row in r["rows"].items() if row.get("numerics")]  # Inductor off eager's outputs
        error = "; ".join(filter(None, [error, *off]))
        if r.get("note"):
            error = f"{error} ({r['note']})" if error else r["note"]
        out.append([
            r["case"], f"{r['what']} ({r['family']})", r["shape"], r["status"],
            *(_f(_ms(rows, b), ".4g") for b in BACKENDS),
            _f(_ratio(rows, "eager", "pipec"), ".3g", "×"),
            _f(_ratio(rows, "inductor", "pipec"), ".3g", "×"),
            _f(_ratio(rows, "inductor-reduce-overhead", "pipec-reduce-overhead"), ".3g", "×"),
            " / ".join(_field(rows, b, "compile_cold_s", ".1f")
                       for b in ("pipec", "pipec-reduce-overhead", "inductor", "inductor-reduce-overhead")),
            " / ".join(_field(rows, b, "max_error", ".2g") for b in ("pipec", "pipec-reduce-overhead", "inductor")),
            " / ".join(_field(rows, b, "peak_mib", ".0f")
                       for b in ("eager", "inductor", "inductor-reduce-overhead", "pipec", "pipec-reduce-overhead")),
            " / ".join(_held(rows, b)
                       for b in ("inductor", "inductor-reduce-overhead", "pipec", "pipec-reduce-overhead")),
            kernel_text, error.replace("|", "\\|"),
        ])
    return out


def markdown(records: list[dict], meta: dict) -> str:
    lines = [f"# pipec real-model suite ({meta['size']} size, {meta['device']})", "",
             f"{meta['started']} · {meta['host']} · {meta.get('device_name') or meta['device']} · "
             + ", ".join(f"{k} {v}" for k, v in (meta.get("versions") or {}).items()), "",
             f"Timer: {meta.get('timer') or '-'}. Ratios: the other backend's time / pipec's (> 1: pipec "
             "faster), from one process. RO: mode reduce-overhead (CUDA Graphs). compile: the first call, "
             "empty caches. peak MiB: one call's peak memory above the memory at rest; held MiB: what a "
             "compiled backend keeps between calls beyond the weights (CUDA Graph pools, preallocated "
             "buffers), the allocator's reserved memory grown across its compile and three calls after it "
             "(in parentheses: its CUDA Graph pools' share, the rest being the caller's pool; CUDA only; under "
             "reduce-overhead the peak is ~0 and held is the figure).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(records)]
    ok = sum(r["status"] == "ok" for r in records)
    lines += ["", f"{ok} of {len(records)} cases ok."]
    if meta.get("not_started"):
        lines.append(f"Not started (they would not end before the run's deadline): {', '.join(meta['not_started'])}.")
    return "\n".join(lines) + "\n"


def write_results(out: Path, records: list[dict], meta: dict) -> None:
    first = next((r["bench"] for r in records if r["bench"]), {})
    meta = {**meta, "device_name": first.get("device_name"), "versions": first.get("versions"),
            "timer": first.get("timer"), "seconds": time.perf_counter() - meta["clock"]}
    meta.pop("clock")
    out.write_text(json.dumps({"suite": "pipec issue 19 real models", **meta, "cases": records}, indent=2))
    out.with_suffix(".md").write_text(markdown(records, meta))


def combine(parts: list[Path], out: Path) -> int:
    """One results file and table from several: the cases in the order given (a case measured
    twice keeps its last row), the first part's header, and each part's start time and host."""
    try:
        loaded = [json.loads(p.read_text()) for p in parts]
    except (OSError, ValueError) as e:
        print(f"error: cannot read a results file: {e}", file=sys.stderr)
        return 2
    records = {r["case"]: r for data in loaded for r in data["cases"]}
    meta = {k: v for k, v in loaded[0].items() if k not in ("suite", "cases")}
    meta["parts"] = [{"file": p.name, "started": d.get("started"), "host": d.get("host"), "seconds": d.get("seconds")}
                     for p, d in zip(parts, loaded)]
    meta["seconds"] = sum(d.get("seconds") or 0 for d in loaded)
    meta["not_started"] = list(dict.fromkeys(c for d in loaded for c in d.get("not_started", []) if c not in records))
    out.write_text(json.dumps({"suite": "pipec issue 19 real models", **meta, "cases": list(records.values())},
                              indent=2))
    text = markdown(list(records.values()), meta)
    starts = ", ".join(f"{p['file']} from {p['started']} on {p['host']}" for p in meta["parts"])
    out.with_suffix(".md").write_text(text.replace("\n\nTimer:", f"\n\nCombined from {starts}.\n\nTimer:", 1))
    print(f"{len(records)} cases from {len(parts)} files: {out} and {out.with_suffix('.md')}")
    return 0


# ---------------------------------------------------------------- fitting a run into a lease

EXPECT_MARGIN = (1.15, 5.0)  # expected seconds: earlier seconds x pace x 1.15 + 5 (lease hosts differ)
PACE_LIMITS = (0.5, 3.0)  # how far this host's pace may move the earlier seconds
UNKNOWN_CASE_SECONDS = 60.0


def _earlier_cases(files: list[Path]) -> list[dict]:
    cases = []
    for path in files:
        try:
            cases += json.loads(Path(path).read_text()).get("cases", [])
        except (OSError, ValueError) as exc:
            raise SystemExit(f"error: cannot read results {path}: {exc}") from None
    return cases


def earlier_seconds(files: list[Path]) -> dict[str, float]:
    """Each case's wall seconds in earlier results (a later file's case wins); only cases that
    finished count, a cut-off case's seconds being its budget, not its need."""
    return {c["case"]: c["seconds"] for c in _earlier_cases(files) if c.get("status") == "ok" and c.get("seconds")}


def done_cases(files: list[Path]) -> set[str]:
    return {c["case"] for c in _earlier_cases(files) if c.get("status") == "ok"}


class Deadline:
    """Which cases a run with a deadline starts, and with what budget (module docstring).

    Lease hosts differ by up to 2x in the seconds a case takes (session 44's host against
    session 43's), so the earlier seconds are scaled by this host's pace: the median, over the
    cases this run has finished, of their seconds against their earlier seconds. A fast host
    then fits more cases into a command, and a slow one starts none it cannot finish."""

    def __init__(self, seconds: float | None, earlier: dict[str, float], budget: float, start: float):
        self.seconds, self.earlier, self.budget, self.start = seconds, earlier, budget, start
        self.paces: list[float] = []

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - (time.perf_counter() - self.start)

    def pace(self) -> float:
        if not self.paces:
            return 1.0
        return min(max(statistics.median(self.paces), PACE_LIMITS[0]), PACE_LIMITS[1])

    def finished(self, case: str, seconds: float) -> None:
        """A case of this run ended ok after `seconds`: it tells this host's pace."""
        if self.earlier.get(case):
            self.paces.append(seconds / self.earlier[case])

    def expected(self, case: str) -> float | None:
        scale, extra = EXPECT_MARGIN
        return self.earlier[case] * self.pace() * scale + extra if case in self.earlier else None

    def fits(self, case: str) -> bool:
        """Expected to end in time; a case no earlier results predict starts while a minute is left
        (the shortest real-size case took 35 s on an H100), its budget ending at the deadline."""
        expected = self.expected(case)
        return (min(self.budget, UNKNOWN_CASE_SECONDS) if expected is None else expected) <= self.left()

    def case_budget(self) -> float:
        return max(1.0, min(self.budget, self.left()))


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the results file (JSON); the markdown table goes beside it (.md)")
    parser.add_argument("--cases", help="comma-separated subset (default: every case of the size)")
    parser.add_argument("--suite", choices=("transformers", "diffusers", "all"), default="transformers",
                        help="transformers' models (hf_models.py, default), diffusers' (diffusers_models.py) or both")
    parser.add_argument("--size", choices=("real", "tiny"), default="real")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --size tiny: a smoke test)")
    parser.add_argument("--inductor", action=argparse.BooleanOptionalAction, default=None,
                        help="measure Inductor (default: only on CUDA)")
    parser.add_argument("--budget", type=float, default=900.0, help="seconds per case (default 900)")
    parser.add_argument("--warmup", type=float, default=25.0, help="do_bench warm-up, ms")
    parser.add_argument("--rep", type=float, default=100.0, help="do_bench measuring time, ms")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds over all backends")
    parser.add_argument("--pipec-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a compile option for every pipec row (pipec bench --option; e.g. grouped_matmuls=true)")
    parser.add_argument("--extra-rounds", type=int, default=1,
                        help="up to this many more rounds while a backend's rounds disagree by > 10%%")
    parser.add_argument("--warm", action="store_true", help="also time warm compiles (from the caches; not in the "
                        "table, in the JSON): more device time per case")
    parser.add_argument("--fusion", default="default", help="pipec fusion policy")
    parser.add_argument("--reduce-overhead", action=argparse.BooleanOptionalAction, default=True,
                        help="also Inductor's and pipec's reduce-overhead mode (default; --no-reduce-overhead "
                             "halves the compiles: for the largest models on a tight budget)")
    parser.add_argument("--pipec-default", action=argparse.BooleanOptionalAction, default=True,
                        help="time pipec's default mode (default; --no-pipec-default with reduce-overhead on "
                             "times the CUDA Graph pair and Inductor default alone: one compile fewer a case)")
    parser.add_argument("--atol", type=float, help="numerics check (with --rtol; default: the case's tolerance)")
    parser.add_argument("--rtol", type=float)
    parser.add_argument("--deadline", type=float, help="seconds the whole run may take: start only the cases "
                        "expected to end before it (--expect), each case's budget ending there too")
    parser.add_argument("--expect", nargs="+", type=Path, default=[], metavar="RESULTS_JSON",
                        help="earlier results whose case seconds predict this run's (for --deadline)")
    parser.add_argument("--skip-done", nargs="+", type=Path, default=[], metavar="RESULTS_JSON",
                        help="run none of the cases that finished ok in these results (a split run's next command)")
    parser.add_argument("--combine", nargs="+", type=Path, metavar="RESULTS_JSON",
                        help="run nothing: write one table (--out) from the results of runs split over several "
                             "commands (the device allows 10 minutes a command)")
    args = parser.parse_args()
    if args.combine:
        return combine(args.combine, Path(args.out))
    if (args.atol is None) != (args.rtol is None):
        parser.error("give --atol and --rtol together")
    cases = all_cases(args.size, args.suite)
    names = [c["case"] for c in cases]
    chosen = [c.strip() for c in args.cases.split(",")] if args.cases else names
    unknown = [c for c in chosen if c not in names]
    if unknown:
        print(f"error: unknown case {unknown[0]!r} (cases: {', '.join(names)})", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and args.size == "real":
        import torch

        if not torch.cuda.is_available():
            print("error: the real sizes need CUDA (try --size tiny --device cpu for a smoke test)", file=sys.stderr)
            return 2

    out = Path(args.out)
    meta = {"size": args.size, "device": args.device, "host": platform.node(), "clock": time.perf_counter(),
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "options": {k: [str(p) for p in v] if k in ("expect", "skip_done") else v
                        for k, v in vars(args).items() if k not in ("out", "cases", "combine")}}
    records = []
    by_name = {c["case"]: c for c in cases}
    done = done_cases(args.skip_done)
    todo = [by_name[name] for name in dict.fromkeys(chosen) if name not in done]
    if done & set(chosen):
        print(f"done in earlier results, not run: {', '.join(n for n in chosen if n in done)}", flush=True)
    deadline = Deadline(args.deadline, earlier_seconds(args.expect), args.budget, meta["clock"])
    meta["not_started"] = []
    warm_imports()
    with tempfile.TemporaryDirectory(prefix="pipec-real-models-") as workdir:
        for case in todo:
            if not deadline.fits(case["case"]):
                meta["not_started"].append(case["case"])
                continue
            records.append(run_case(case, argparse.Namespace(**{**vars(args), "budget": deadline.case_budget()}),
                                    Path(workdir)))
            if records[-1]["status"] == "ok":
                deadline.finished(case["case"], records[-1]["seconds"])
            write_results(out, records, meta)
    print()
    if meta["not_started"]:
        print(f"not started (they would not end before the {args.deadline:.0f} s deadline): "
              f"{', '.join(meta['not_started'])}", flush=True)
    write_results(out, records, meta)  # again: the cases left after the last one run are in it too
    print(out.with_suffix(".md").read_text())
    print(f"results: {out} and {out.with_suffix('.md')}  ({time.perf_counter() - meta['clock']:.0f} s in all)")
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
