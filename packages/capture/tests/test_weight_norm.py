"""A weight-normed layer's backward (`aten._weight_norm_interface_backward`) decomposes into ops
pipec generates (pipec_capture.decompositions.weight_norm_backward) instead of an extern call."""

import pytest
import torch

import pipec
from pipec_capture.decompositions import weight_norm_backward

aten = torch.ops.aten


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("shape,dim", [((6, 4, 5), 0), ((6, 4, 5), 2), ((3, 7), 1)])
def test_the_decomposition_is_atens_backward(shape, dim, dtype):
    g = torch.Generator().manual_seed(0)
    v = torch.randn(shape, generator=g).to(dtype)
    g_shape = [1] * len(shape)
    g_shape[dim] = shape[dim]
    scale = torch.randn(g_shape, generator=g).to(dtype)
    w, norms = aten._weight_norm_interface(v, scale, dim)
    grad = torch.randn(w.shape, generator=g).to(dtype)
    want = aten._weight_norm_interface_backward(grad, v, scale, norms, dim)
    got = weight_norm_backward(grad, v, scale, norms, dim)
    for a, b in zip(got, want, strict=True):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        torch.testing.assert_close(a, b)


def test_a_weight_normed_convolution_trains_without_an_extern_call():
    """wav2vec2's positional convolution: weight norm over the kernel dim, grouped."""
    torch.manual_seed(0)
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(8, 8, 5, padding=2, groups=2), dim=2)
    x = torch.randn(2, 8, 12)
    conv(x).tanh().sum().backward()
    want = {n: p.grad.clone() for n, p in conv.named_parameters()}
    conv.zero_grad()
    compiled = pipec.compile(conv)
    compiled(x).tanh().sum().backward()
    session = compiled.pipec_session
    assert not any("weight_norm" in op for s in session.graphs for op in (s.extern_ops or ())), \
        [s.extern_ops for s in session.graphs]
    for name, p in conv.named_parameters():
        torch.testing.assert_close(p.grad, want[name])
