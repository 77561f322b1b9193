"""Run the full OpInfo sweep (every sample of every op_db entry that exercises Core ATen).

    python scripts/opinfo_sweep.py --dtype float16 --device cuda --out $OUT/opinfo_float16.json

Writes a JSON file (per entry: status, Core ATen overloads, per-sample detail; per overload:
status) and prints the summary line. Exit status 1 when any result is wrong or an entry's status
differs from tests/opinfo/opinfo_expectations.py (with --check).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
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
    args = parser.parse_args(argv)

    import torch

    import opinfo_expectations
    import opinfo_harness as h

    dtype = getattr(torch, args.dtype)
    results, start = [], time.perf_counter()
    ops = [op for op in h.entries(dtype, args.device) if args.only is None or h.entry_name(op) in args.only]
    for k, op in enumerate(ops):
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
    doc = {
        "dtype": args.dtype, "device": args.device, "torch": torch.__version__, "seconds": time.perf_counter() - start,
        "summary": line, "entries": [r.to_dict() for r in results], "overloads": dict(sorted(overloads.items())),
        "core_overloads_total": len(h.core_overloads()), "expectation_mismatches": mismatches,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    for m in mismatches:
        print("MISMATCH", m)
    print(line)
    return 1 if entry_counts.get(h.WRONG) or mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
