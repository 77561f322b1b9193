"""Run the full OpInfo sweep (every sample of every op_db entry that exercises Core ATen).

    python scripts/opinfo_sweep.py --dtype float16 --device cuda --out $OUT/opinfo_float16.json
    python scripts/opinfo_sweep.py --dtype bfloat16 --device cuda --jobs 8 --time-limit 200 --check

`--jobs N` runs N processes, each every N-th entry (`--shard I/N`), and merges their results
(compiling dominates on the GPU). `--time-limit S` starts no entry after S seconds: the
summary then counts the entries that ran and says how many did not.

Writes a JSON file (per entry: status, Core ATen overloads, per-sample detail; per overload:
status) and prints the summary line. Exit status 1 when any result is wrong or an entry's status
differs from tests/opinfo/opinfo_expectations.py (with --check).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "opinfo"))
os.environ.setdefault("PIPEC_DISABLE_PLUGINS", "broken")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16", "float64"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-samples", type=int, default=None, help="samples per entry (default: all)")
    parser.add_argument("--only", nargs="*", default=None, help="entry names to run (default: all)")
    parser.add_argument("--out", default="opinfo_sweep.json", help="results JSON path")
    parser.add_argument("--check", action="store_true", help="also compare with the expectations table")
    parser.add_argument("--jobs", type=int, default=1, help="processes, each running every N-th entry")
    parser.add_argument("--shard", default=None, help="I/N: run only entries I, I+N, I+2N, ... (used by --jobs)")
    parser.add_argument("--time-limit", type=float, default=None, help="start no entry after this many seconds")
    args = parser.parse_args(argv)

    import torch

    import opinfo_expectations
    import opinfo_harness as h

    dtype = getattr(torch, args.dtype)
    results, start, not_run = [], time.perf_counter(), 0
    if args.jobs > 1:
        results, not_run = _run_shards(args, argv if argv is not None else sys.argv[1:], h)
    else:
        ops = [op for op in h.entries(dtype, args.device) if args.only is None or h.entry_name(op) in args.only]
        if args.shard:
            i, n = (int(v) for v in args.shard.split("/"))
            ops = ops[i::n]
        for k, op in enumerate(ops):
            if args.time_limit is not None and time.perf_counter() - start > args.time_limit:
                not_run = len(ops) - k
                print(f"time limit: {not_run} entries not run", flush=True)
                break
            r = h.run_entry(op, dtype, args.device, max_samples=args.max_samples)
            if r is None:
                continue
            results.append(r)
            print(f"[{k + 1}/{len(ops)}] {r.name}: {r.status} {r.detail[:160]}", flush=True)
    overloads = h.overload_statuses(results)
    entry_counts = collections.Counter(r.status for r in results)
    overload_counts = collections.Counter(overloads.values())
    mismatches = []
    if args.check:
        for r in results:
            problem = opinfo_expectations.check(r.name, r.status, args.dtype)
            if problem:
                mismatches.append(problem)
    line = h.summary_line(entry_counts, overload_counts, args.dtype, args.device)
    if not_run:
        line += f" ({not_run} entries not run: time limit)"
    doc = {
        "dtype": args.dtype, "device": args.device, "torch": torch.__version__, "seconds": time.perf_counter() - start,
        "summary": line, "entries": [r.to_dict() for r in results], "overloads": dict(sorted(overloads.items())),
        "core_overloads_total": len(h.core_overloads()), "expectation_mismatches": mismatches,
        "entries_not_run": not_run,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    for m in mismatches:
        print("MISMATCH", m)
    print(line)
    return 1 if entry_counts.get(h.WRONG) or mismatches else 0


def _run_shards(args, argv: list[str], h):
    """Run `--jobs` child processes of this script (one shard each), then read their results back."""
    children, skip = [], False
    for a in argv:  # the parent's own options stay with the parent
        if skip:
            skip = False
        elif a in ("--jobs", "--out"):
            skip = True  # and its value
        elif not a.startswith(("--jobs=", "--out=", "--check")):
            children.append(a)
    with tempfile.TemporaryDirectory(prefix="opinfo-shards-") as tmp:
        outs = [Path(tmp) / f"shard{i}.json" for i in range(args.jobs)]
        procs = [subprocess.Popen([sys.executable, __file__, *children, "--shard", f"{i}/{args.jobs}", "--out", str(out)],
                                  stdout=subprocess.DEVNULL)
                 for i, out in enumerate(outs)]
        for p in procs:
            p.wait()
        results, not_run = [], 0
        for out in outs:
            if not out.exists():
                raise SystemExit(f"opinfo shard {out.name} wrote no results (it crashed; run it alone with --shard)")
            doc = json.loads(out.read_text())
            not_run += doc.get("entries_not_run", 0)
            results += [_entry_from_dict(h, e) for e in doc["entries"]]
    return results, not_run


def _entry_from_dict(h, e: dict):
    samples = [h.SampleResult(s["status"], tuple(s["overloads"]), tuple(tuple(x) for x in s["externs"]),
                              s["detail"]) for s in e["samples"]]
    return h.EntryResult(e["name"], e["status"], tuple(e["overloads"]), samples, e["skipped_samples"])


if __name__ == "__main__":
    sys.exit(main())
