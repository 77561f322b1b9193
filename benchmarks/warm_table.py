"""Issue 21's warm-compile target, read off `real_models.py --warm` results: per case, the warm
compile against its tracing (Dynamo + AOTAutograd), and where the rest went.

    python benchmarks/warm_table.py benchmarks/results/warm_compiles_h200_s22_b.json [more.json ...]

Target: warm compile <= tracing + 1 s. A case's warm compile is pipec's second compile in the
same process after `torch._dynamo.reset()` (pipec bench), so it finds the compile cache and
Triton's cache warm, and the libraries (cuBLAS, cuDNN) already initialized.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TRACING = ("dynamo", "aot_autograd")
PARTS = ("capture", "fusion", "codegen", "runtime_load", "triton_compile", "first_run")


def rows(results: dict) -> list[dict]:
    out = []
    for case in results["cases"]:
        pipec = (case.get("rows") or {}).get("pipec") or {}
        warm = pipec.get("compile_profile_warm")
        if not warm:
            out.append({"case": case["case"], "status": case.get("status"), "error": case.get("error")})
            continue
        seconds = warm["seconds"]
        tracing = sum(seconds.get(p, 0.0) for p in TRACING)
        out.append({"case": case["case"], "cold_s": pipec.get("compile_cold_s"), "warm_s": pipec["compile_warm_s"],
                    "tracing_s": tracing, "beyond_s": pipec["compile_warm_s"] - tracing,
                    "parts": {p: seconds.get(p, 0.0) for p in PARTS}, "cache_hits": pipec.get("cache_hits")})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path)
    args = parser.parse_args(argv)
    print("| case | cold s | warm s | tracing s | beyond tracing s | " + " | ".join(PARTS) + " | cache hits |")
    print("|" + " --- |" * (6 + len(PARTS)))
    for path in args.results:
        for r in rows(json.loads(path.read_text())):
            if "warm_s" not in r:
                print(f"| {r['case']} | {r['status']}: {r['error']} |")
                continue
            mark = "" if r["beyond_s"] <= 1.0 else " (over)"
            hits = ", ".join(f"{k} {v}" for k, v in (r["cache_hits"] or {}).items())
            cold = f"{r['cold_s']:.1f}" if r["cold_s"] is not None else "-"
            print(f"| {r['case']} | {cold} | {r['warm_s']:.2f} | {r['tracing_s']:.2f} | "
                  f"{r['beyond_s']:.2f}{mark} | " + " | ".join(f"{r['parts'][p]:.2f}" for p in PARTS) + f" | {hits} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
