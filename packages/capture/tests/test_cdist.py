"""torch.cdist as generated ops (decompositions.cdist_forward / cdist_backward): each p's
distances and x1's gradient equal ATen's kernels in float64, for every compute mode, with
rows at distance 0 and coordinates that do not differ (where the gradient's formulas divide)."""

import pytest
import torch

from pipec_capture.decompositions import cdist_backward, cdist_forward

from conftest import dynamo_capture

aten = torch.ops.aten
PS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")]


def _pair(rows1: int, rows2: int, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x1, x2 = torch.randn(2, rows1, 6, generator=g, dtype=dtype), torch.randn(2, rows2, 6, generator=g, dtype=dtype)
    x2[:, 1, :3] = x1[:, 1, :3]  # three equal coordinates
    x2[:, 2] = x1[:, 2]  # a pair at distance 0
    return x1, x2


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("rows", [(5, 7), (30, 4)], ids=["direct", "over_25_rows"])
@pytest.mark.parametrize("mode", [None, 1, 2], ids=["if_necessary", "use_mm", "no_mm"])
def test_distances_and_gradient_equal_atens(p, rows, mode):
    x1, x2 = _pair(*rows)
    torch.testing.assert_close(cdist_forward(x1, x2, p, mode), aten._cdist_forward(x1, x2, p, mode))
    dist = aten._cdist_forward(x1, x2, p, 2)
    grad = torch.randn(dist.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    torch.testing.assert_close(cdist_backward(grad, x1, x2, p, dist), aten._cdist_backward(grad, x1, x2, p, dist))


def test_empty_rows_of_coordinates():
    x1, x2 = torch.randn(3, 0, dtype=torch.float64), torch.randn(4, 0, dtype=torch.float64)
    for p in PS:
        torch.testing.assert_close(cdist_forward(x1, x2, p), aten._cdist_forward(x1, x2, p, None))


@pytest.mark.parametrize("p", [1.0, 2.0, float("inf")])
def test_lowered_with_no_extern_forward_and_backward(p):
    """Through Dynamo and AOTAutograd: both graphs lowered (and checked against their ATen graphs
    by the reference interpreter), no extern left, gradients of both inputs as eager's."""
    x1, x2 = _pair(5, 7, seed=2, dtype=torch.float32)

    def f(a, b):
        return (torch.cdist(a, b, p=p) * torch.linspace(0.5, 2, 7)).sum()

    a, b = x1.clone().requires_grad_(), x2.clone().requires_grad_()
    out, records = dynamo_capture(f, [a, b], grad=True)
    out.backward()
    ea, eb = x1.clone().requires_grad_(), x2.clone().requires_grad_()
    f(ea, eb).backward()
    torch.testing.assert_close(a.grad, ea.grad)
    torch.testing.assert_close(b.grad, eb.grad)
    assert len(records) == 2
    assert [n.attr("target") for graph, _, _ in records for n in graph.nodes if n.op == "extern"] == []
