"""Wide rows in training: layer_norm and softmax forward + backward, eager / Inductor / pipec.

    python benchmarks/train_rows.py --out $OUT/train_rows.json [--budgets 16384,131072] [--gpu]

One training step of a module alone (forward, then backward with a fixed output gradient) on
rows of 8192-32768 elements, where the persistent-row budget decides whether the backward's
row kernel holds its rows in registers or loops over them. pipec runs with its defaults, and
once per `--budgets` value of `persistent_reduction_bytes` and per `--policies` fusion policy. Every variant's input and parameter
gradients are checked against eager's (fp32: atol/rtol 1e-3, as weight gradients sum thousands
of rows; bf16: 3e-2) before it is timed with triton.testing.do_bench (rep 100 ms), in rounds
with the variants in rotated order; the median over rounds is reported, with the range. With
`--gpu`, instead, the GPU time of its kernels per step (torch.profiler, 10 steps): a module
this small trains host-bound, so the wall time of a compiled step says more about Dynamo and
AOTAutograd's per-call work than about the kernels. (A separate run: a profiler can leave
Triton launch hooks set, which sends pipec's later launches down Triton's slower path.)

H200, 2026-12-01 (torch 2.11, triton 3.6): the steps are host-bound. Eager's steps held still
(0.349-0.351 ms for layer_norm fp32 4096 x 8192) while Inductor's and pipec's moved by up to
±30% between rounds (0.368-0.681 ms). Kernel times, per step, of layer_norm's backward row
kernel: fp32 4096 x 16384 0.266 ms held against 0.382 looped; fp32 4096 x 8192 0.131 against
0.154; bf16 4096 x 16384 0.133 either way. That is why the row budget counts inputs, not the
values live across a reduction (configs.py). With the weight and bias column sums recomputing
layer_norm's fp32 gradient from the bf16 tensors (fusion, recompute_stored.py), those sums take
0.069 + 0.034 ms at bf16 4096 x 16384.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys

import torch
from policies import POLICIES, register_policies
from torch import nn

CASES = [
    ("layer_norm fp32 4096x8192", lambda: nn.LayerNorm(8192), (4096, 8192), torch.float32),
    ("layer_norm bf16 4096x16384", lambda: nn.LayerNorm(16384), (4096, 16384), torch.bfloat16),
    ("layer_norm fp32 4096x16384", lambda: nn.LayerNorm(16384), (4096, 16384), torch.float32),
    ("layer_norm bf16 16384x4096", lambda: nn.LayerNorm(4096), (16384, 4096), torch.bfloat16),
    ("softmax bf16 2048x32768", lambda: nn.Softmax(-1), (2048, 32768), torch.bfloat16),
]


def gpu_ms_per_step(step, steps: int = 10) -> float:
    """The GPU time of the kernels one call of `step` runs (torch.profiler), whatever the host does."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages() if e.device_time_total > 0) / steps / 1e3


def run_case(make, shape, dtype, budgets, policies, rounds, gpu=False) -> dict:
    import triton.testing

    import pipec

    torch.manual_seed(0)
    module = make().to("cuda", dtype)
    x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
    grad_out = torch.randn(shape, device="cuda", dtype=dtype)

    def step_of(fn):
        def step():
            x.grad = None
            for p in module.parameters():
                p.grad = None
            fn(x).backward(grad_out)
        return step

    def gradients(fn):
        step_of(fn)()
        return [x.grad.clone()] + [p.grad.clone() for p in module.parameters()]

    expected = gradients(module)
    tolerance = dict(atol=1e-3, rtol=1e-3) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    torch._dynamo.reset()
    variants = {"eager": module, "inductor": torch.compile(module), "pipec": pipec.compile(module)}
    for policy in policies:
        variants[f"pipec {policy}"] = pipec.compile(module, fusion=policy)
    for budget in budgets:
        variants[f"pipec {budget // 1024} KiB"] = pipec.compile(module, persistent_reduction_bytes=budget)
    row = {}
    for name, fn in variants.items():  # compiles (and autotunes) pipec's variants on the first call
        got = gradients(fn)
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b, **tolerance)
        row[name] = {"ms_rounds": [], "max_error": max((a.float() - b.float()).abs().max().item()
                                                       for a, b in zip(got, expected))}
    names = list(variants)
    if gpu:
        for name in names:
            row[name]["ms"] = gpu_ms_per_step(step_of(variants[name]))
            row[name]["ms_rounds"] = [row[name]["ms"]]
        torch._dynamo.reset()
        return row
    for r in range(rounds):  # rotated order: a drifting clock does not favour whoever runs first
        for name in names[r % len(names):] + names[:r % len(names)]:
            row[name]["ms_rounds"].append(triton.testing.do_bench(step_of(variants[name]), warmup=25, rep=100))
    for name in names:
        row[name]["ms"] = statistics.median(row[name]["ms_rounds"])
    torch._dynamo.reset()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results here as JSON")
    parser.add_argument("--budgets", default="16384,131072",
                        help="comma-separated persistent_reduction_bytes values to run pipec with too")
    parser.add_argument("--policies", default="",
                        help="comma-separated fusion policies to run pipec with too (policies.py: default-stored)")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds, variants in rotated order")
    parser.add_argument("--cases", help="comma-separated substrings: run only the cases whose names contain one")
    parser.add_argument("--gpu", action="store_true",
                        help="report the GPU time of each step's kernels (torch.profiler) instead of wall time")
    parser.add_argument("--tuning-log", action="store_true", help="print what pipec's autotuning measured")
    args = parser.parse_args()
    if args.tuning_log:
        logging.basicConfig(format="%(name)s: %(message)s")
        logging.getLogger("pipec.tuning").setLevel(logging.INFO)
    if not torch.cuda.is_available():
        print("train_rows.py needs a CUDA GPU", file=sys.stderr)
        return 2
    budgets = [int(b) for b in args.budgets.split(",") if b]
    policies = [p for p in args.policies.split(",") if p]
    if any(p in POLICIES for p in policies):
        register_policies()
    results = []
    wanted = args.cases.split(",") if args.cases else None
    for name, make, shape, dtype in CASES:
        if wanted and not any(w in name for w in wanted):
            continue
        row = run_case(make, shape, dtype, budgets, policies, args.rounds, args.gpu)
        print(f"{name:<28} " + "  ".join(f"{v} {r['ms']:.3f} ({min(r['ms_rounds']):.3f}-{max(r['ms_rounds']):.3f})"
                                         for v, r in row.items()), flush=True)
        results.append({"case": name, **row})
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"benchmark": "train_rows", "device": torch.cuda.get_device_name(),
                       "torch": torch.__version__, "cases": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
