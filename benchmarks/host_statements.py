"""Where a specialized run's host time goes, by statement kind: each of pipec's specialized runs
of a training step (train_step.py's cases) is rebuilt with a `perf_counter_ns` reading after
every top-level statement, then the step runs `--steps` times.

    python benchmarks/host_statements.py --case bert                 # H200: ms per step by kind
    python benchmarks/host_statements.py --case bert --tiny          # CPU smoke test (interpreter)
    python benchmarks/host_statements.py --inference qwen2           # an inference call of a suite case

`--inference CASE`: a case of the real-model suite (tests/real_models/hf_models.py: qwen2, bert,
gpt2-4x1024-bf16, ...), one call under `torch.compile(backend="pipec")` in inference mode instead
of a training step; its plain call time is printed before the instrumented one.

Kinds: guards (input checks and copies), alloc (a fresh storage), bind (a buffer bound to its
storage), launch (a kernel launch), mm (a library GEMM), sdpa (attention), extern (another ATen
call), reinterpret (a view made from its root), release (references dropped). A reading costs
~0.1 us, so the instrumented step is slower than the plain one by about that per statement.
"""

from __future__ import annotations

import argparse
import collections
import gc
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_step  # noqa: E402 - the benchmarks' training cases

_KINDS = (
    ("guards", re.compile(r"if |v\d+(, v\d+)*,? = inputs$|v\d+ = v\d+\.contiguous\(\)$")),
    ("alloc", re.compile(r".*EMPTY")),
    ("launch", re.compile(r"(LAUNCH|L|SLOW|RUN)_\d+\(|v\d+ = WRITTEN_OVER")),
    ("reinterpret", re.compile(r".*REINTERPRET")),
    ("mm", re.compile(r".*Eaten_(mm|addmm|bmm|_addmm_activation)_")),
    ("sdpa", re.compile(r".*Eaten__scaled_dot_product")),
    ("extern", re.compile(r".*Eaten_")),
    ("release", re.compile(r"[\w =]+= None$")),
    ("bind", re.compile(r"v\d+ = slot\d+(_\d+)?$")),
)


def kind(statement: str) -> str:
    s = statement.strip()
    return next((name for name, pattern in _KINDS if pattern.match(s)), "other")


def instrument(runner, key, run, totals: dict, label: str):
    """`run` rebuilt with a clock reading after each top-level statement, adding to `totals`."""
    lines = run.source.splitlines()
    statements: list[list[str]] = []  # each top-level statement with the block it opens (the guards' `if`)
    for line in lines[1:]:
        if line.startswith("    ") and not line.startswith("     ") or not statements:
            statements.append([line])
        else:
            statements[-1].append(line)
    body, kinds = [lines[0], "    _T0 = _NOW()"], collections.Counter()
    for statement in statements:
        k = kind(statement[0])
        kinds[k] += 1
        tick = f"    _T = _NOW(); _ACC[{f'{label}:{k}'!r}] += _T - _T0; _T0 = _T"
        body.extend([tick, *statement] if statement[0].strip().startswith("return") else [*statement, tick])
    namespace = run.__globals__
    namespace["_NOW"], namespace["_ACC"] = time.perf_counter_ns, totals
    exec(compile("\n".join(body) + "\n", f"<instrumented {label}>", "exec"), namespace)  # noqa: S102
    timed = namespace["run"]
    timed.source = run.source
    return timed, kinds


def training_step(args, device: str):
    net, inputs, autocast = train_step.build(args.case, args.tiny, device)
    fn = train_step.compiled("pipec", net)
    return train_step.make_step(fn, net, inputs, autocast, device)[0]


def inference_call(case: str, tiny: bool, device: str):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "real_models"))
    import hf_models

    built = hf_models.build(case, hf_models.TINY if tiny else "real", device=device)
    fn = torch.compile(built.model, backend="pipec")

    def call():
        with torch.inference_mode():
            return fn(*built.inputs)

    return call


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="bert", choices=("bert", "gpt2", "vocab_loss") + train_step.suite_training_cases())
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--inference", metavar="CASE", help="an inference call of this real-model suite case instead")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    step = inference_call(args.inference, args.tiny, device) if args.inference else training_step(args, device)
    for _ in range(4):  # compile, then specialize every program
        step()
    train_step.sync(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    train_step.sync(device)
    print(f"plain step {(time.perf_counter() - start) * 1e3 / args.steps:.2f} ms")
    totals = collections.defaultdict(int)
    runners = [o for o in gc.get_objects() if type(o).__name__ == "ProgramRunner"]
    for n, runner in enumerate(r for r in runners if r.specialized):
        for key, (dev, run) in list(runner.specialized.items()):
            label = f"{runner.name}{n}"
            timed, kinds = instrument(runner, key, run, totals, label)
            runner.specialized[key] = (dev, timed)
            print(f"{label}: statements {dict(kinds)}")
    totals.clear()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    train_step.sync(device)
    print(f"instrumented step {(time.perf_counter() - start) * 1e3 / args.steps:.2f} ms")
    per_run = collections.defaultdict(float)
    for label, ns in sorted(totals.items(), key=lambda kv: -kv[1]):
        ms = ns / args.steps / 1e6
        per_run[label.split(":")[0]] += ms
        print(f"  {label:24s} {ms:7.3f} ms/step")
    print("per run (ms/step):", {k: round(v, 3) for k, v in per_run.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
