#!/usr/bin/env python3
"""Run the differential fuzzer: N random graphs through pipec, against eager.

    .venv/bin/python scripts/fuzz.py --count 2000 [--seed 0] [--family all] [--device cuda] [--bounds-check] [--seconds S]

Families (tests/fuzz_graphs.py): classic (float32 pointwise/reduction graphs, every fusion
preset), matmul (epilogues), half (bf16/fp16, judged against float64), train (gradients),
constants, dynamic (sizes changing across calls), views (chains into reductions, gathers,
scatters), mixed; `all` draws from every one. Each graph also carries its fusion policies
(presets and random ones).

Stops at the first mismatch and prints the program, shrunk by hypothesis to a small repro.
With `--device cuda` kernels are bounds-checked (`--no-bounds-check` turns it off): a failed
device assertion kills the CUDA context, so the program about to run is written to
`--last-program` first and is the repro (hypothesis cannot shrink after that).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import time
import traceback

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))


class TimeUp(BaseException):
    """--seconds ran out: ends the drawing."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=30, help="steps of a classic graph")
    parser.add_argument("--family", default="all", help="a family name, several joined by commas, or all")
    parser.add_argument("--device", default="cpu", help="where eager and pipec run (cuda: compiled kernels)")
    parser.add_argument("--bounds-check", dest="bounds_check", action="store_true", default=None,
                        help="bounds-checked kernels (codegen option bounds_check; default on with cuda)")
    parser.add_argument("--no-bounds-check", dest="bounds_check", action="store_false")
    parser.add_argument("--last-program", default=None,
                        help="file the program about to run is written to (default with cuda: fuzz-last-program.txt)")
    parser.add_argument("--summary", default=None, help="write the figures as JSON to this file")
    parser.add_argument("--keep-going", action="store_true",
                        help="record each failing program (unshrunk) and go on drawing: a large run's "
                             "every finding, not only its first")
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop drawing new graphs after this long (the figures count only the graphs run)")
    args = parser.parse_args()

    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    from fuzz_graphs import families, features, programs
    from fuzz_pipeline import check_program

    cuda = args.device.startswith("cuda")
    bounds_check = cuda if args.bounds_check is None else args.bounds_check
    last = args.last_program or ("fuzz-last-program.txt" if cuda else None)
    table = families(args.device)
    table["classic"] = programs(max_steps=args.max_steps)
    names = sorted(table) if args.family == "all" else args.family.split(",")
    unknown = [n for n in names if n not in table]
    if unknown:
        parser.error(f"unknown family {', '.join(unknown)} (known: {', '.join(sorted(table))}, all)")
    strategy = st.one_of([table[n] for n in names]) if len(names) > 1 else table[names[0]]

    done: collections.Counter = collections.Counter()
    failures: list = []
    start = time.perf_counter()

    @seed(args.seed)
    @settings(max_examples=args.count, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(prog):
        if args.seconds is not None and time.perf_counter() - start > args.seconds:
            # not an Exception: hypothesis lets it through at once instead of drawing up to --count
            # more programs (a run under `timeout` was killed before its summary while it drew)
            done["skipped after --seconds"] += 1
            raise TimeUp
        if last:
            pathlib.Path(last).write_text(f"{prog}\n\n{prog!r}\n")
        try:
            check_program(prog, device=args.device, bounds_check=bounds_check)
        except Exception as exc:
            if not failures or args.keep_going:  # as drawn (without --keep-going hypothesis then shrinks it)
                # where it was raised too: an error (not a mismatch) is found from its frames
                where = "".join(traceback.format_exception(exc)[-12:])
                print(f"{'failing' if args.keep_going else 'first failing'} program:\n{prog}\n"
                      f"{type(exc).__name__}: {str(exc)[:2000]}\n{where}", file=sys.stderr, flush=True)
            failures.append((prog, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"))
            if args.keep_going:
                return
            raise
        done["graphs"] += 1
        done.update(features(prog))
        if done["graphs"] % 50 == 0:
            print(f"{done['graphs']} graphs ok ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)

    status = 0
    try:
        run()
    except TimeUp:
        pass
    except Exception as exc:
        for sub in getattr(exc, "exceptions", [exc]):
            notes = "\n".join(getattr(sub, "__notes__", []))
            print(f"--- {type(sub).__name__}: {str(sub)[:2000]}\n{notes}", file=sys.stderr)
        print(f"fuzz: mismatch after {done['graphs']} graphs (shrunk repros above)", file=sys.stderr)
        status = 1
    if args.keep_going and failures:
        errors = collections.Counter(error for _, error in failures)
        print(f"fuzz: {len(failures)} of {done['graphs'] + len(failures)} graphs failed "
              f"({len(errors)} distinct errors):", file=sys.stderr)
        for error, n in errors.most_common():
            print(f"  {n} x {error}", file=sys.stderr)
        status = 1
    seconds = time.perf_counter() - start
    skipped = done.pop("skipped after --seconds", 0)
    kinds = {k: v for k, v in sorted(done.items()) if k != "graphs"}  # graphs that exercised each feature
    if status == 0:
        print(f"fuzz: {done['graphs']} graphs on {args.device}, 0 mismatches "
              f"({', '.join(f'{k} {v}' for k, v in kinds.items())}; bounds check {'on' if bounds_check else 'off'}; "
              f"{seconds:.0f} s)")
    if args.summary:
        pathlib.Path(args.summary).write_text(json.dumps({
            "graphs": done["graphs"] + (len(failures) if args.keep_going else 0),
            "mismatches": len(failures) if args.keep_going else len(failures) and 1, "by_kind": kinds, "seed": args.seed,
            "count": args.count, "family": args.family, "device": args.device, "bounds_check": bounds_check,
            "seconds": round(seconds), "stopped_by_time_limit": bool(skipped), "first_failure": str(failures[0][0]) if failures else None,
            "failures": [{"program": repr(p), "error": e} for p, e in failures] if args.keep_going else None}, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
