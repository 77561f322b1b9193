"""Programmatic dependent launch under CUDA Graphs, A/B in one process (runtime pdl.py).

    PIPEC_HF_MODEL=gpt2 python benchmarks/pdl_ab.py benchmarks/models/hf_model.py --out $OUT/gpt2_pdl.json

The model file is what `pipec bench` takes. For each variant, pipec compiles the model with
mode="reduce-overhead", then the idle time between kernels of `--calls` profiled calls is summed by
the kinds of the kernels around it (profile_kernels.py `kernel_gaps`), and three do_bench medians
are taken. Variants: `wait` (the default: each Triton kernel waits for the one ahead first thing),
`signal` (it also signals the next kernel right after, `gdc_launch_dependents`), `off` (pdl=False).
A variant listed twice is timed twice: the drift between them is the noise to judge the rest by.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from profile_kernels import kernel_gaps, parse_and_load

VARIANTS = {"wait": ("tl.extra.cuda.gdc_wait()",),
            "signal": ("tl.extra.cuda.gdc_wait()", "tl.extra.cuda.gdc_launch_dependents()"),
            "off": None}


def compile_variant(model, variant: str):
    import pipec
    import pipec_runtime_cudagraph.pdl as pdl

    torch._dynamo.reset()
    if VARIANTS[variant] is None:
        return pipec.compile(model, mode="reduce-overhead", pdl=False)
    pdl.GRID_DEPENDENCY = VARIANTS[variant]  # read when a kernel is loaded, i.e. in this compile's first call
    return pipec.compile(model, mode="reduce-overhead")


def measure(fn, inputs, calls: int) -> dict:
    from torch.profiler import ProfilerActivity, profile
    from triton.testing import do_bench

    with torch.no_grad():
        for _ in range(3):
            out = fn(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn(*inputs)
            torch.cuda.synchronize()
        row = kernel_gaps(prof.events(), calls)
        row["ms"] = [do_bench(lambda: fn(*inputs), warmup=25, rep=100) for _ in range(3)]
    first = out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)
    row["checksum"] = float(first.float().abs().sum())  # the variants compute the same values
    return row


def main() -> int:
    args, model, inputs, results = parse_and_load(__doc__, "pdl_ab.py", "wait,signal,off,wait", 5, 6)
    results["runs"] = []
    for variant in args.backends.split(","):
        if variant not in VARIANTS:
            raise SystemExit(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
        row = {"variant": variant, **measure(compile_variant(model, variant), inputs, args.calls)}
        results["runs"].append(row)
        ms = sorted(row["ms"])[1]
        print(f"== {results['model']} / {variant}: {ms:.4f} ms (do_bench median of 3), gaps {row['us']:.1f} us/call, "
              f"checksum {row['checksum']:.6g}", flush=True)
        for g in row["pairs"][: args.top]:
            print(f"  {g['us']:8.1f} us x{g['count']:<6g} median {g['median_us']:5.2f}  {g['before']} -> {g['after']}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
