"""Fill a tuning cache from the real-model suite, for `scripts/learn_tuning_table.py` to learn
the shipped table from (GPU only):

    PIPEC_KERNEL_DIR=/tmp/learn python benchmarks/tune_suite.py --cases swin,convnext --deadline 300
    PIPEC_KERNEL_DIR=/tmp/learn python benchmarks/tune_suite.py --cases sd15_unet,sd_vae_decoder
    PIPEC_KERNEL_DIR=/tmp/learn python benchmarks/tune_suite.py --cases convnext,sd15_unet --mode reduce-overhead
    PIPEC_KERNEL_DIR=/tmp/learn python benchmarks/tune_suite.py --cases none --train resnet,t5,vit,bert
    python scripts/learn_tuning_table.py /tmp/learn --family sm90 --merge \
        --out packages/runtime-cudagraph/src/pipec_runtime_cudagraph/tuning_tables/sm90.json

Name --out: without it the script writes the *installed* table, which a non-editable reinstall
(scripts/gpu_install.sh) then replaces with the repository's (session 12's run 10 lost its table so).

Each case of tests/real_models/hf_models.py is built at its real size and compiled by pipec in
default mode, in this one process (one import of torch and transformers for all), and called
once: the first call times what the shipped table has no confident answer for, and the tuning
cache under $PIPEC_KERNEL_DIR keeps every timing with its features. `--train` does the same for
training steps (benchmarks/train_step.py's cases: the forward and backward graphs under AMP),
whose backward kernels (batch-norm and layer-norm gradients, reductions over the batch) no
inference case has. Nothing is timed for a
result here; `benchmarks/real_models.py` is the benchmark. Cases start only while `--deadline`
seconds have not passed; a case that fails is reported and the next one runs.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from real_models import registry  # noqa: E402 - the suite's case list, imported by path


def tune_case(hf, case: str, mode: str = "default") -> float:
    """Compile `case` (a transformers case, or a diffusion model of diffusers_models.py) with pipec
    and call it once; the first call's wall seconds."""
    import pipec

    if case not in hf.real_cases():
        hf = registry("diffusers_models.py")
        if case not in hf.BY_NAME:
            raise KeyError(f"{case!r} is no case of hf_models.py or diffusers_models.py")
    built = hf.build(case, hf.REAL, device="cuda")
    compiled = pipec.compile(built.model, mode=mode)
    start = time.perf_counter()
    with torch.no_grad():
        compiled(*built.inputs)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def tune_training(case: str) -> float:
    """Compile `case`'s training step (train_step.py) with pipec and run it once; its wall seconds."""
    import pipec
    from train_step import build, make_step

    net, inputs, autocast = build(case, tiny=False, device="cuda")
    step, _ = make_step(pipec.compile(net), net, inputs, autocast, "cuda")
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", help="comma-separated real cases, transformers or diffusion ones (default: every "
                    "transformers case; `none`: no inference case)")
    ap.add_argument("--train", default="", help="comma-separated training cases of train_step.py (default: none)")
    ap.add_argument("--mode", default="default", choices=("default", "reduce-overhead"),
                    help="compile mode of the inference cases: reduce-overhead times choice groups on the CUDA Graph "
                         "clock, decisions the table keeps apart from default mode's (its RO compiles time them all)")
    ap.add_argument("--deadline", type=float, default=3600.0, help="start no case after this many seconds")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("tune_suite.py: needs a CUDA GPU (it fills a GPU family's tuning cache)")
    if not os.environ.get("PIPEC_KERNEL_DIR") and not os.environ.get("PIPEC_CACHE_DIR"):
        print("note: no PIPEC_KERNEL_DIR: timings go to ~/.cache/pipec/kernels/tuning", flush=True)
    hf = registry()
    cases = [] if args.cases == "none" else args.cases.split(",") if args.cases else list(hf.real_cases())
    jobs = [(case, "first call", lambda c=case: tune_case(hf, c, args.mode)) for case in cases]
    jobs += [(f"{case} (training)", "first step", lambda c=case: tune_training(c)) for case in args.train.split(",") if case]
    start, failed = time.perf_counter(), 0
    for case, what, tune in jobs:
        if time.perf_counter() - start > args.deadline:
            print(f"{case}: not started (past the {args.deadline:.0f} s deadline)", flush=True)
            continue
        try:
            print(f"{case}: {what} {tune():.1f} s", flush=True)
        except Exception as e:  # noqa: BLE001 - one case's failure must not stop the others' tuning
            failed += 1
            print(f"{case}: failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        torch._dynamo.reset()
        gc.collect()
        torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
