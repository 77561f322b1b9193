"""Autotuning on the GPU times each config by running it again and again: a launch that
writes its output into its input's slot (in-place memory plan) must not see its own
output as input on the next run. Found by benchmarks/gemm_epilogue.py (fusion=none, bf16)."""

import pytest
import torch
import torch.nn.functional as F

import pipec

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (autotuning runs there)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unfused_chain_with_in_place_slots_matches_eager_after_tuning(dtype):
    def chain(x, b):
        return F.gelu(torch.exp(x) + b) * 2 - 1

    torch.manual_seed(0)
    x = torch.randn(512, 1000, device="cuda", dtype=dtype)
    b = torch.randn(1000, device="cuda", dtype=dtype)
    compiled = pipec.compile(chain, fusion="none", cache="none")
    tol = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}[dtype]
    for _ in range(2):  # the first call tunes, the second runs the chosen configs
        torch.testing.assert_close(compiled(x, b), chain(x, b), **tol)
