"""grid_sample's backward (`aten.grid_sampler_2d_backward`) decomposes into ops pipec generates
(pipec_capture.decompositions.grid_sampler_2d_backward) for bilinear and nearest sampling with
zeros or border padding; the other modes stay ATen's kernel."""

import pytest
import torch
import torch.nn.functional as F

import pipec
from pipec_capture.decompositions import grid_sampler_2d_backward

aten = torch.ops.aten
g = torch.Generator().manual_seed(0)
IMAGE = torch.randn(2, 3, 5, 7, generator=g)
GRID = torch.rand(2, 4, 6, 2, generator=g) * 2.4 - 1.2  # some points outside the image
GRAD = torch.randn(2, 3, 4, 6, generator=g)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", [0, 1], ids=["zeros", "border"])
@pytest.mark.parametrize("mode", [0, 1], ids=["bilinear", "nearest"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_decomposition_is_atens_backward(mode, padding_mode, align_corners, dtype):
    args = (GRAD.to(dtype), IMAGE.to(dtype), GRID.to(dtype), mode, padding_mode, align_corners)
    want = aten.grid_sampler_2d_backward(*args, [True, True])
    got = grid_sampler_2d_backward(*args, [True, True])
    for a, b in zip(got, want, strict=True):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        torch.testing.assert_close(a, b)
    assert grid_sampler_2d_backward(*args, [False, True])[0] is None


@pytest.mark.parametrize("mode,padding_mode", [(2, 0), (0, 2)], ids=["bicubic", "reflection"])
def test_other_modes_stay_atens(mode, padding_mode):
    assert grid_sampler_2d_backward(GRAD, IMAGE, GRID, mode, padding_mode, False, [True, True]) is NotImplemented


def test_a_training_step_through_grid_sample_has_no_extern_call():
    """Deformable attention's sampling (bilinear, zeros): both gradients as eager's."""
    x, grid = IMAGE.clone().requires_grad_(), GRID.clone().requires_grad_()

    def step(x, grid):
        return (F.grid_sample(x * 2, grid, align_corners=False) ** 2).sum()

    want = torch.autograd.grad(step(x, grid), (x, grid))
    compiled = pipec.compile(step)
    got = torch.autograd.grad(compiled(x, grid), (x, grid))
    assert [s.kind for s in compiled.pipec_session.graphs] == ["forward", "backward"]  # compiled, not eager
    assert not any("grid_sampler" in op for s in compiled.pipec_session.graphs for op in (s.extern_ops or ())), \
        [s.extern_ops for s in compiled.pipec_session.graphs]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
