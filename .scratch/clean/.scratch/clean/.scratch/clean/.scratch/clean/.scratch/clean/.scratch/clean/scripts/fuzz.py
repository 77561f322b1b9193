#!/usr/bin/env python3
"""Run the differential fuzzer: N random graphs through every fusion preset, against eager.

    .venv/bin/python scripts/fuzz.py --count 2000 [--seed 0] [--max-steps 30] [--device cuda]

Stops at the first mismatch and prints the program, shrunk by hypothesis to a small repro.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--device", default="cpu", help="where eager and pipec run (cuda: compiled kernels)")
    args = parser.parse_args()

    from hypothesis import HealthCheck, given, seed, settings

    from fuzz_graphs import programs
    from fuzz_pipeline import check_program

    done = {"n": 0}
    failures: list = []
    start = time.perf_counter()

    @seed(args.seed)
    @settings(max_examples=args.count, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(programs(max_steps=args.max_steps))
    def run(prog):
        try:
            check_program(prog, device=args.device)
        except Exception as exc:
            if not failures:  # the first failure, as drawn (hypothesis then shrinks it)
                print(f"first failing program:\n{prog}\n{type(exc).__name__}: {str(exc)[:2000]}", file=sys.stderr)
            failures.append(prog)
            raise
        done["n"] += 1
        if done["n"] % 50 == 0:
            print(f"{done['n']} graphs ok ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)

    try:
        run()
    except Exception as exc:
        for sub in getattr(exc, "exceptions", [exc]):
            notes = "\n".join(getattr(sub, "__notes__", []))
            print(f"--- {type(sub).__name__}: {str(sub)[:2000]}\n{notes}", file=sys.stderr)
        print(f"fuzz: mismatch after {done['n']} graphs (shrunk repros above)", file=sys.stderr)
        return 1
    print(f"fuzz: {done['n']} graphs on {args.device}, 0 mismatches, every fusion preset "
          f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
