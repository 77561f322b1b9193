"""Where the host time of one call goes: a cProfile of `--calls` calls per backend.

    python benchmarks/host_profile.py benchmarks/models/gpt2_block_bf16.py --backends inductor,pipec

A small model on a fast GPU is host-bound: the GPU finishes each kernel before the host has
enqueued the next, so `do_bench` measures the host. This prints, per backend, the host
microseconds per call (GPU synchronized once at the end of the loop) and the functions with
the most own time per call, so the Python work on pipec's call path can be compared with
Inductor's line by line. Writes the rows as JSON with --out.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import torch
from profile_kernels import build, parse_and_load


def host_profile(fn, inputs, calls: int, top: int) -> dict:
    with torch.no_grad():
        for _ in range(5):
            fn(*inputs)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn(*inputs)
        torch.cuda.synchronize()
        wall_us = (time.perf_counter() - start) * 1e6 / calls
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            fn(*inputs)
        profiler.disable()
        torch.cuda.synchronize()
        syncs = _synchronizing_calls(fn, inputs)
    stats = pstats.Stats(profiler)
    rows = []
    for (path, line, func), (_, ncalls, own, cumulative, _) in stats.stats.items():
        rows.append({"function": f"{Path(path).name}:{line}({func})", "calls": ncalls / calls,
                     "own_us": own * 1e6 / calls, "cumulative_us": cumulative * 1e6 / calls})
    rows.sort(key=lambda r: -r["own_us"])
    return {"wall_us": wall_us, "syncs_per_call": syncs, "profiled_own_us": sum(r["own_us"] for r in rows), "functions": rows[:top]}


def _synchronizing_calls(fn, inputs, calls: int = 3) -> list[str]:
    """The warnings torch's sync debug mode gives for `calls` calls: each is a host sync (a
    `.item()`, a blocking copy, a cudaFree), which stops the host from running ahead."""
    import warnings

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(calls):
                fn(*inputs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sorted({str(w.message).splitlines()[0][:160] for w in caught if "synchroniz" in str(w.message).lower()})


def main() -> int:
    args, model, inputs, results = parse_and_load(__doc__, "host_profile.py", "inductor,pipec", 200, 25)
    name = results["model"]
    for backend in args.backends.split(","):
        row = host_profile(build(backend, model), inputs, args.calls, args.top)
        results["backends"][backend] = row
        print(f"\n== {name} / {backend}: {row['wall_us']:.1f} us/call on the host "
              f"(profiled own time {row['profiled_own_us']:.1f} us/call)", flush=True)
        for message in row["syncs_per_call"]:
            print(f"  host sync: {message}")
        for r in row["functions"]:
            print(f"  {r['own_us']:8.2f} own {r['cumulative_us']:8.2f} cum  x{r['calls']:<6g} {r['function'][:100]}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
