"""Issue 4 case: GPT-2 small (124M) forward in fp32, batch 1 x 128 tokens (launch-bound).

The model is benchmarks/runtime_overhead.py's GPT2 (plain nn.Modules, tied embeddings).

    pipec bench benchmarks/models/gpt2_small_fp32.py
    python benchmarks/profile_kernels.py benchmarks/models/gpt2_small_fp32.py --backends pipec_cudagraph,inductor_ro
"""

import importlib.util
import sys
from pathlib import Path

import torch
from bench_inputs import default_device


def _gpt2_class():
    path = Path(__file__).resolve().parents[1] / "runtime_overhead.py"
    spec = importlib.util.spec_from_file_location("pipec_bench_runtime_overhead", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Dynamo and pickling look classes up by module name
    spec.loader.exec_module(module)
    return module.GPT2


torch.manual_seed(0)
model = _gpt2_class()().to(default_device()).eval()
tolerance = {"atol": 1e-3, "rtol": 1e-3}


def example_inputs():
    g = torch.Generator(device=default_device()).manual_seed(1)
    return (torch.randint(0, 50257, (1, 128), generator=g, device=default_device()),)
