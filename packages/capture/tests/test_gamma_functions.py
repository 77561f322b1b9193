"""lgamma and digamma as generated arithmetic (decompositions.lgamma / digamma): eager's values,
within the dtype's tolerance, over poles, signed zeros, infinities, tiny and large arguments and
the reflection range, and through a compiled training step (lgamma's gradient is digamma)."""

import pytest
import torch

from pipec_capture.decompositions import digamma, lgamma

from conftest import dynamo_capture

SPECIAL = [0.0, -0.0, -1.0, -2.0, -2.5, 1e-8, -1e-8, 3e-4, -3.0001, -0.9999, 4.9999, 0.5, 1.0, 2.0, 30.0, -7.3, -100.5, 1e6, 1e30,
           float("inf"), float("-inf"), float("nan")]


def _arguments(dtype):
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.tensor(SPECIAL), torch.randn(2000, generator=g) * 5, torch.rand(2000, generator=g) * 200,
                      torch.rand(500, generator=g) * 1e-3]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fn,ref", [(lgamma, torch.lgamma), (digamma, torch.digamma)], ids=["lgamma", "digamma"])
def test_values_of_eager(fn, ref, dtype):
    x = _arguments(dtype)
    got = fn(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got, ref(x), equal_nan=True)


def test_subnormal_arguments():
    """lgamma(x) ~ -log|x| for a subnormal x: the reflection's pi / sin(pi x) would overflow float32."""
    x = torch.tensor([1e-39, 2e-39, -1e-39, 1e-44])
    torch.testing.assert_close(lgamma(x), torch.lgamma(x))
    torch.testing.assert_close(digamma(x), torch.digamma(x))


def test_integer_arguments_stay_with_torch():
    assert lgamma(torch.arange(3)) is NotImplemented and digamma(torch.arange(3)) is NotImplemented


def test_lowered_with_no_extern_forward_and_backward():
    """A Student-t style log-likelihood term: lgamma forward, digamma in its backward, both
    graphs lowered with no extern call and checked by the reference interpreter; the gradient
    is eager's."""
    g = torch.Generator().manual_seed(1)
    x0 = torch.rand(4, 6, generator=g) * 10 + 0.1

    def f(x):
        return (torch.lgamma(x * 0.5 + 0.5) - torch.lgamma(x * 0.5)).sum()

    x = x0.clone().requires_grad_()
    out, records = dynamo_capture(f, [x], grad=True)
    out.backward()
    ex = x0.clone().requires_grad_()
    f(ex).backward()
    torch.testing.assert_close(out, f(x0))
    torch.testing.assert_close(x.grad, ex.grad)
    assert len(records) == 2
    assert [n.attr("target") for graph, _, _ in records for n in graph.nodes if n.op == "extern"] == []
