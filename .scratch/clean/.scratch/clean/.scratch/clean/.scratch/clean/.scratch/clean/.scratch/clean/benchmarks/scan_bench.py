"""Generated scan kernels (cumsum / cumprod / logcumsumexp) against eager on the GPU.

    python benchmarks/scan_bench.py [--json out.json]

For each case: the pipec-compiled function and eager, timed with triton.testing.do_bench
(median ms), the bandwidth the pipec kernel reaches (bytes read + written / time), and the
largest error of each against a float64 reference (fp32 accumulation should make pipec's no
worse than eager's). Cases cover persistent rows, long rows (the block loop), columns (a scan
dim that is not innermost) and a fused prologue/epilogue. Needs CUDA.
"""

from __future__ import annotations

import argparse
import json

import torch

CASES = [
    # (name, function, shape, dim, dtype)
    ("cumsum rows 4096x1024", lambda x: torch.cumsum(x, 1), (4096, 1024), 1, torch.float32),
    ("cumsum rows 4096x1024 fp16", lambda x: torch.cumsum(x, 1), (4096, 1024), 1, torch.float16),
    ("cumsum long rows 64x262144", lambda x: torch.cumsum(x, 1), (64, 262144), 1, torch.float32),
    ("cumsum long rows 64x262144 bf16", lambda x: torch.cumsum(x, 1), (64, 262144), 1, torch.bfloat16),
    ("cumsum columns 8192x1024", lambda x: torch.cumsum(x, 0), (8192, 1024), 0, torch.float32),
    ("cumprod rows 4096x1024", lambda x: torch.cumprod(1 + 1e-3 * x, 1), (4096, 1024), 1, torch.float32),
    ("logcumsumexp rows 4096x1024", lambda x: torch.logcumsumexp(x, 1), (4096, 1024), 1, torch.float32),
    ("exp -> cumsum -> mul (fused)", lambda x: torch.cumsum(x.exp(), 1) * x, (4096, 1024), 1, torch.float32),
]


def reference(fn, x):
    return fn(x.double())


def run_case(name, fn, shape, dim, dtype) -> dict:
    import triton.testing

    import pipec

    torch.manual_seed(0)
    x = torch.randn(shape, device="cuda").to(dtype)
    torch._dynamo.reset()
    compiled = pipec.compile(fn)
    got = compiled(x)
    eager = fn(x)
    ref = reference(fn, x)
    err_pipec = (got.double() - ref).abs().max().item()
    err_eager = (eager.double() - ref).abs().max().item()
    ms_pipec = triton.testing.do_bench(lambda: compiled(x))
    ms_eager = triton.testing.do_bench(lambda: fn(x))
    moved = 2 * x.numel() * x.element_size()
    return {"case": name, "shape": list(shape), "dim": dim, "dtype": str(dtype).removeprefix("torch."),
            "pipec_ms": ms_pipec, "eager_ms": ms_eager, "speedup": ms_eager / ms_pipec,
            "pipec_gbps": moved / ms_pipec / 1e6, "max_err_pipec": err_pipec, "max_err_eager": err_eager}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("scan_bench.py needs CUDA")
    rows = [run_case(*case) for case in CASES]
    for r in rows:
        print(f"{r['case']:<36} pipec {r['pipec_ms']:8.3f} ms  eager {r['eager_ms']:8.3f} ms  "
              f"x{r['speedup']:5.2f}  {r['pipec_gbps']:7.1f} GB/s  err {r['max_err_pipec']:.2e} "
              f"(eager {r['max_err_eager']:.2e})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
