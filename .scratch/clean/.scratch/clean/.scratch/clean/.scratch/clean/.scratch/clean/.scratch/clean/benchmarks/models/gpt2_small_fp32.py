"""Issue 4 case: GPT-2 small (124M) forward in fp32, batch 1 x 128 tokens (launch-bound).

The model is benchmarks/runtime_overhead.py's GPT2 (plain nn.Modules, tied embeddings).

    pipec bench benchmarks/models/gpt2_small_fp32.py
    python benchmarks/profile_kernels.py benchmarks/models/gpt2_small_fp32.py --backends pipec_cudagraph,inductor_ro
"""

import torch
from bench_inputs import class_from, default_device

torch.manual_seed(0)
model = class_from("benchmarks/runtime_overhead.py", "pipec_bench_runtime_overhead", "GPT2")().to(default_device()).eval()
tolerance = {"atol": 1e-3, "rtol": 1e-3}


def example_inputs():
    g = torch.Generator(device=default_device()).manual_seed(1)
    return (torch.randint(0, 50257, (1, 128), generator=g, device=default_device()),)
