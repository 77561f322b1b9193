"""Issue 6 case: softmax over the last dim of a bf16 8192 x 8192 tensor.

    pipec bench benchmarks/models/softmax_bf16.py
    pipec bench benchmarks/models/softmax_bf16.py --inputs small_inputs --dtype float32 --device cpu

One read and one write is the floor (256 MiB each way); the issue's target is >= 3.4 TB/s.
"""

import torch
from bench_inputs import randn


def model(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def example_inputs():
    return (randn(8192, 8192, dtype=torch.bfloat16, seed=0),)


def small_inputs():
    return (randn(4, 100, dtype=torch.bfloat16, seed=0, device="cpu"),)
