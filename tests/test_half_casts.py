"""A cast to float16/bfloat16 inside a fused kernel rounds, as eager's does, although the
kernel goes on computing in fp32. pipec kept the unrounded fp32 value: `x.to(bf16).float() - x`
(the rounding residual) came out all zeros, and a bf16 ResNet-50, whose batch norms compute in
fp32 and cast back, drifted to 2-3x eager's error against float64 (the numerics check failed)."""

from __future__ import annotations

import pytest
import torch

import pipec


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_rounding_residual_of_a_cast(dtype):
    x = torch.randn(32, 48, generator=torch.Generator().manual_seed(0))

    def f(x):
        return x.to(dtype).float() - x

    want = f(x)
    assert want.abs().max() > 0  # the residual is there to be kept
    torch.testing.assert_close(pipec.compile(f, cache="none")(x), want, rtol=0, atol=0)


def test_batch_norm_in_bf16_rounds_where_eager_does():
    """Eval-mode batch norm on bf16 (computed in fp32 by its decomposition, cast back to bf16),
    then a residual add and ReLU in bf16: one fused kernel, equal to eager to bf16 rounding."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(8).eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.uniform_(0.5, 2)
    bn = bn.to(torch.bfloat16)

    def f(x, skip):
        return torch.relu(bn(x) + skip)

    x, skip = torch.randn(2, 8, 5, 5, dtype=torch.bfloat16), torch.randn(2, 8, 5, 5, dtype=torch.bfloat16)
    with torch.no_grad():
        got, want = pipec.compile(f, cache="none")(x, skip), f(x, skip)
    # eager rounds bn's result to bf16 before the add; so must pipec (not 1 bf16 ulp of drift per op)
    assert (got.float() - want.float()).abs().max() <= 2 ** -6 * want.float().abs().max()
    torch.testing.assert_close(got, want)
