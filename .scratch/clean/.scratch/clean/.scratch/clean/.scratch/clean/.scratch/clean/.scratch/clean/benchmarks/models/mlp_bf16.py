"""Issue 6 case: Linear -> GELU -> Linear in bf16, 8192 x 2048 -> 8192 -> 2048.

    pipec bench benchmarks/models/mlp_bf16.py
    pipec bench benchmarks/models/mlp_bf16.py --inputs small_inputs --dtype float32 --device cpu

Two GEMMs of 2 x 8192 x 2048 x 8192 FLOPs (0.55 TFLOP); the issue's target is <= 0.80 ms
(eager 0.85 ms, Inductor 0.87 ms on its H200).
"""

import torch
from bench_inputs import randn
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 2048)).to(torch.bfloat16).eval()

# Eager rounds the hidden activations to bf16 after the first GEMM and after GELU; a fused
# epilogue rounds once. One bf16 ulp of a hidden value (~2^-9) summed over 8192 products
# gives output differences of ~2e-3 where the output is near 0, far above assert_close's
# bf16 atol of 1e-5: keep bf16's rtol, allow 1e-2 absolute.
tolerance = {"atol": 1e-2, "rtol": 1.6e-2}


def example_inputs():
    return (randn(8192, 2048, dtype=torch.bfloat16, seed=1),)


def small_inputs():
    return (randn(16, 2048, dtype=torch.bfloat16, seed=1, device="cpu"),)
