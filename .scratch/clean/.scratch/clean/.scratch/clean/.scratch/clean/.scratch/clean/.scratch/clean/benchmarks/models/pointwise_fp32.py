"""Issue 6 case: an fp32 pointwise chain, gelu(a) * sigmoid(b) + c, 3 inputs of 2^26 elements.

    pipec bench benchmarks/models/pointwise_fp32.py                                      # on the GPU
    pipec bench benchmarks/models/pointwise_fp32.py --inputs small_inputs --device cpu   # smoke test

Pure memory traffic (3 reads, 1 write): compare its TB/s with the copy bandwidth.
"""

import torch
from bench_inputs import randn
from torch.nn import functional as F


def model(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return F.gelu(a) * torch.sigmoid(b) + c


def example_inputs():
    return tuple(randn(2**26, dtype=torch.float32, seed=i) for i in range(3))


def small_inputs():
    return tuple(randn(1000, dtype=torch.float32, seed=i, device="cpu") for i in range(3))
