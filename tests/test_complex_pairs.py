"""Complex tensors inside a graph, computed on (real, imaginary) pairs (capture
complex_pairs.py): rotary embeddings written with complex numbers (Meta's Llama, torchtitan,
transformers' Llama 4) compile instead of running eagerly, and match eager; an FFT (FNet) is a library call on the
pairs. What has no pairs form (a complex graph input or output) still runs eagerly, with a
warning naming it."""

import warnings

import pytest
import torch

import pipec

g = torch.Generator().manual_seed(0)
XQ, XK = torch.randn(2, 6, 3, 8, generator=g), torch.randn(2, 6, 2, 8, generator=g)
SCALE = torch.rand(6, 1, generator=g) + 0.5


def freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    return torch.polar(torch.ones(end, dim // 2), torch.outer(torch.arange(end).float(), freqs))


def rope(xq, xk):
    """Meta's Llama `apply_rotary_emb`, the frequencies built in the graph."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis(8, 6).view(1, xq_.shape[1], 1, xq_.shape[-1])
    return torch.view_as_real(xq_ * fc).flatten(3), torch.view_as_real(xk_ * fc).flatten(3)


def mixed(x, scale):
    """A complex value times a real tensor and a scalar, conjugated, sliced, its parts read."""
    z = torch.view_as_complex(x.reshape(2, 6, 3, 4, 2)).transpose(1, 2)
    w = (z * scale.view(1, 1, 6, 1) * 0.5).conj() + z[..., :1]
    return torch.view_as_real(w[:, 1:]).sum(-1), w.real * 2 + w.imag


@pytest.mark.parametrize("fn, args", [(rope, (XQ, XK)), (mixed, (XQ, SCALE))], ids=["rope", "mixed"])
def test_complex_ops_compile_on_pairs_and_match_eager(fn, args):
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        got = pipec.compile(fn, fullgraph=True, cache="none")(*args)
    for a, b in zip(got, fn(*args)):
        torch.testing.assert_close(a, b)
    assert pipec.explain(fn, *args).extern_ops == {}  # every op is pipec's own kernel


def _assert_trains_like_eager(loss, *inputs):
    """Gradients of `loss` through pipec (no fallback to eager allowed) equal eager's."""
    want = [t.clone().requires_grad_() for t in inputs]
    loss(*want).backward()
    torch._dynamo.reset()
    got = [t.clone().requires_grad_() for t in inputs]
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        pipec.compile(loss, cache="none")(*got).backward()
    for a, b in zip(got, want):
        torch.testing.assert_close(a.grad, b.grad)


def test_rope_trains_like_eager():
    """The joint graph goes to pairs before it is split, so no complex value is saved for the
    backward (a complex output of the forward graph, which the IR cannot hold)."""
    def loss(xq, xk):
        q, k = rope(xq, xk)
        return (q * q.roll(1, 1)).sum() + (k.sin()).sum()

    _assert_trains_like_eager(loss, XQ, XK)


def test_a_complex_value_crossing_a_graph_boundary_runs_eagerly_with_a_warning():
    def returns_complex(x):
        return torch.view_as_complex(x.reshape(2, 6, 3, 4, 2)) * 2

    torch._dynamo.reset()
    with pytest.warns(pipec.PipecFallbackWarning, match="complex tensors: the graph returns a complex tensor"):
        got = pipec.compile(returns_complex, cache="none")(XQ)
    torch.testing.assert_close(got, returns_complex(XQ))


def fnet_mixing(x):
    """FNet's token mixing: a 2-D FFT over the sequence and hidden dims, its real part."""
    return torch.fft.fftn(x * 2, dim=(1, 2)).real + 1


def spectral_filter(x, w):
    """A real FFT, a complex weight per frequency, and back (FFT convolution)."""
    return torch.fft.irfft(torch.fft.rfft(x, dim=-1) * torch.view_as_complex(w), n=x.shape[-1], dim=-1)


X = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(1))
W = torch.randn(5, 2, generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("fn, args", [(fnet_mixing, (X,)), (spectral_filter, (X, W))], ids=["fnet", "rfft-irfft"])
def test_ffts_compile_as_library_calls_on_pairs(fn, args):
    """An FFT is a library call on the pairs (`pipec.fft_*_pairs`, IR 1.8): the graph around it
    compiles, under fullgraph too, with no fallback warning."""
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        got = pipec.compile(fn, fullgraph=True, cache="none")(*args)
    torch.testing.assert_close(got, fn(*args))
    externs = pipec.explain(fn, *args).extern_ops
    assert externs and all(op.startswith("pipec.fft_") and op.endswith("_pairs.default") for op in externs), externs


def test_fnet_mixing_trains_like_eager():
    def loss(x, w):
        return (fnet_mixing(x) * spectral_filter(x, w)).sum()

    _assert_trains_like_eager(loss, X, W)
