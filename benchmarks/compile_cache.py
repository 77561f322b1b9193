"""Cold vs warm compile through the compile cache: pipeline time per stage, without Dynamo tracing.

    python benchmarks/compile_cache.py [MODEL.py] [--repeat N] [--processes] [--json out.json]

Default model: examples/gpt2_block.py. For each repeat, an empty cache directory is
made; a *cold* compile fills it (every stage misses) and a *warm* compile (after
torch._dynamo.reset()) reads it (capture's lowering, fusion and codegen are hits; the
runtime load is never cached). Times are pipec's own per-stage times
(`Session.stage_seconds`): Dynamo tracing and AOTAutograd run before the pipeline and
are not part of them (shown apart as "tracing"). Medians over the repeats.

In-process (default), one compile with the cache off runs first so that one-time
costs of the process (imports, first-call warmups) land on neither side. With
--processes every cold and every warm compile runs in a fresh Python process instead:
the numbers a user sees compiling once per process (one-time costs included on both sides).

Runs on the CPU (kernels in Triton's interpreter) or on a GPU; checks that warm and
cold outputs are identical and that the warm compile hit capture, fusion and codegen.
AOTAutograd's cache, which would serve a warm compile whole, is off here (`aot_cache=False`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
STAGES = ("capture", "fusion", "codegen", "runtime")
CACHED = ("capture", "fusion", "codegen")


def load(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    inputs = mod.example_inputs() if callable(mod.example_inputs) else mod.example_inputs
    return mod.model, tuple(inputs)


def compile_once(model, inputs, cache: str) -> dict:
    """One compile + run with a fresh Dynamo; per-stage seconds, hits, outputs."""
    import torch

    from pipec.api import make_options, run_and_compare

    torch._dynamo.reset()
    start = time.perf_counter()
    # pipec's own cache, stage by stage: AOTAutograd's, which would serve the warm compile whole
    # (README, "Compile cache"), is measured by train_step.py and real_models.py --warm
    out, _, mismatch, session = run_and_compare(model, inputs, make_options(cache=cache, aot_cache=False))
    wall = time.perf_counter() - start
    if mismatch:
        raise SystemExit(f"compiled output differs from eager: {mismatch}")
    outs = list(out) if isinstance(out, tuple | list) else [out]
    return {"stages": {s: session.stage_seconds.get(s, 0.0) for s in STAGES}, "wall": wall,
            "hits": session.cache_hits, "misses": session.cache_misses, "outputs": outs}


def child(model_path: pathlib.Path, out_path: str) -> None:
    """--child: one compile in this (fresh) process, through the cache in $PIPEC_CACHE_DIR."""
    import torch

    model, inputs = load(model_path)
    r = compile_once(model, inputs, "local")
    torch.save(r.pop("outputs"), out_path + ".pt")
    pathlib.Path(out_path).write_text(json.dumps(r))


def run_in_process(model_path: pathlib.Path, repeat: int) -> list[tuple[dict, dict]]:
    import torch

    model, inputs = load(model_path)
    compile_once(model, inputs, "none")  # process warm-up, outside both measurements
    pairs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d:
            os.environ["PIPEC_CACHE_DIR"] = str(pathlib.Path(d) / "cache")
            cold = compile_once(model, inputs, "local")
            warm = compile_once(model, inputs, "local")
        for a, b in zip(cold.pop("outputs"), warm.pop("outputs")):
            assert torch.equal(a, b), "warm and cold outputs differ"
        pairs.append((cold, warm))
    return pairs


def run_in_processes(model_path: pathlib.Path, repeat: int) -> list[tuple[dict, dict]]:
    import torch

    pairs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, PIPEC_CACHE_DIR=str(pathlib.Path(d) / "cache"))
            results = []
            for which in ("cold", "warm"):
                out = str(pathlib.Path(d) / which)
                subprocess.run([sys.executable, __file__, str(model_path), "--child", out], env=env, check=True)
                results.append((json.loads(pathlib.Path(out).read_text()), torch.load(out + ".pt")))
            (cold, cold_out), (warm, warm_out) = results
            for a, b in zip(cold_out, warm_out):
                assert torch.equal(a, b), "warm and cold outputs differ"
            pairs.append((cold, warm))
    return pairs


def summarize(pairs: list[tuple[dict, dict]]) -> dict:
    def med(side: int, fn) -> float:
        return statistics.median(fn(p[side]) for p in pairs) * 1e3

    rows = {}
    for s in STAGES:
        rows[s] = (med(0, lambda r, s=s: r["stages"][s]), med(1, lambda r, s=s: r["stages"][s]))
    rows["pipeline"] = (med(0, lambda r: sum(r["stages"].values())), med(1, lambda r: sum(r["stages"].values())))
    rows["cached stages"] = (med(0, lambda r: sum(r["stages"][s] for s in CACHED)),
                             med(1, lambda r: sum(r["stages"][s] for s in CACHED)))
    rows["tracing + run"] = (med(0, lambda r: r["wall"] - sum(r["stages"].values())),
                             med(1, lambda r: r["wall"] - sum(r["stages"].values())))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(ROOT / "examples" / "gpt2_block.py"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--processes", action="store_true", help="each compile in a fresh process")
    parser.add_argument("--json", help="also write the numbers here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    model_path = pathlib.Path(args.model)
    if args.child:
        child(model_path, args.child)
        return 0

    pairs = (run_in_processes if args.processes else run_in_process)(model_path, args.repeat)
    for _, warm in pairs:
        missed = [s for s in CACHED if warm["hits"].get(s, 0) < 1 or warm["misses"].get(s, 0)]
        if missed:
            raise SystemExit(f"warm compile missed the cache at: {', '.join(missed)} (hits {warm['hits']})")
    rows = summarize(pairs)
    where = "a fresh process per compile" if args.processes else "one process (after a warm-up compile)"
    print(f"{model_path.name}: cold vs warm compile, median of {args.repeat}, {where}")
    print(f"{'':<16}{'cold ms':>10}{'warm ms':>10}{'warm/cold':>11}")
    for name, (c, w) in rows.items():
        print(f"{name:<16}{c:>10.2f}{w:>10.2f}{w / c if c else float('nan'):>10.1%}")
    cold, warm = rows["pipeline"]
    ratio = warm / cold
    print(f"warm pipeline time is {ratio:.1%} of cold (target <= 20%): {'OK' if ratio <= 0.20 else 'ABOVE TARGET'}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "model": model_path.name, "repeat": args.repeat, "processes": args.processes,
            "ms": {k: {"cold": c, "warm": w} for k, (c, w) in rows.items()}, "ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
