"""Issue 6 case: layer_norm (with weight and bias) of a bf16 16384 x 4096 tensor.

    pipec bench benchmarks/models/layer_norm_bf16.py
    pipec bench benchmarks/models/layer_norm_bf16.py --inputs small_inputs --dtype float32 --device cpu

The issue's target is >= 3.9 TB/s (one read, one write; the affine parameters are 16 KiB).
"""

import torch
from bench_inputs import randn
from torch import nn

WIDTH = 4096

model = nn.LayerNorm(WIDTH, dtype=torch.bfloat16, device="cpu")
with torch.no_grad():  # not the identity affine: a wrong weight or bias must show in the check
    model.weight.copy_(1 + 0.1 * randn(WIDTH, dtype=torch.bfloat16, seed=10, device="cpu"))
    model.bias.copy_(0.1 * randn(WIDTH, dtype=torch.bfloat16, seed=11, device="cpu"))
model.eval()


def example_inputs():
    return (randn(16384, WIDTH, dtype=torch.bfloat16, seed=0),)


def small_inputs():
    return (randn(8, WIDTH, dtype=torch.bfloat16, seed=0, device="cpu"),)
