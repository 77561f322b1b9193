"""A specialized run makes each chain of views (reshape, slice, permute between attention's
library calls) with one `_reinterpret_tensor` call from the chain's root (runtime views.py)."""

import pytest
import torch
from torch import nn

import pipec
from pipec_runtime_cudagraph import views
from pipec_runtime_cudagraph.launch import ProgramRunner

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(views.REINTERPRET is None, reason="this torch has no _reinterpret_tensor")


class Attention(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.qkv, self.proj, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


def _specialized_sources(model, *inputs, calls=3):
    """(eager's outputs, pipec's last outputs, the specialized runs' sources) of `calls` calls."""
    runners = []
    original = ProgramRunner.__call__

    def spy(self, args, *rest, **kwargs):  # ProgramRunner.__call__(inputs, in_range=False)
        if self not in runners:
            runners.append(self)
        return original(self, args, *rest, **kwargs)

    compiled = pipec.compile(model)
    with torch.no_grad():
        want = model(*inputs)
        ProgramRunner.__call__ = spy
        try:
            for _ in range(calls):
                got = compiled(*inputs)
        finally:
            ProgramRunner.__call__ = original
    sources = [run.source for r in runners for _, run in r.specialized.values()]
    return want, got, sources


def test_attention_views_become_reinterprets_and_match_eager():
    torch.manual_seed(0)
    model = Attention().to(DEVICE).eval()
    x = torch.randn(2, 8, 32, device=DEVICE)
    want, got, sources = _specialized_sources(model, x)
    torch.testing.assert_close(got, want)
    [source] = sources
    body = [ln for ln in source.splitlines() if "REINTERPRET(" in ln]
    assert len(body) >= 4  # q, k, v from the projection, the attention output back to rows (+ weights)
    returned = source.splitlines()[-1].removeprefix("    return [").rstrip("]").split(", ")
    for line in source.splitlines():  # a view call is left as a checked root's fallback, or for an output
        if any(f"Eaten_{op}" in line for op in ("reshape", "slice", "permute", "transpose", "view")):
            assert ("REINTERPRET(" in line and " else " in line) or line.split(" = ")[0].strip() in returned, line


def test_fallback_chain_runs_when_the_root_is_laid_out_otherwise(monkeypatch):
    """An extern result laid out unlike the general run saw it fails the stride check, and the
    view calls themselves run: the result is still eager's."""
    real = views._root_layouts

    def misremembered(runner, symvals, observed, strides=None):
        layouts = real(runner, symvals, observed, strides)
        return {i: (shape, tuple(reversed(stride)) if not sure and len(set(stride)) > 1 else stride, dtype, sure)
                for i, (shape, stride, dtype, sure) in layouts.items()}

    monkeypatch.setattr(views, "_root_layouts", misremembered)
    torch.manual_seed(1)
    model = Attention().to(DEVICE).eval()
    x = torch.randn(2, 8, 32, device=DEVICE)
    want, got, sources = _specialized_sources(model, x)
    torch.testing.assert_close(got, want)
    assert any(" else Eaten_" in ln for src in sources for ln in src.splitlines())


def test_a_returned_view_stays_an_aten_view():
    """A program output is never reinterpreted (no autograd view: no `_base`)."""

    def f(x, w):
        return x.t(), x @ w

    x, w = torch.randn(4, 6, device=DEVICE), torch.randn(6, 3, device=DEVICE)
    runners, original = [], ProgramRunner.__call__

    def spy(self, args, *rest, **kwargs):  # ProgramRunner.__call__(inputs, in_range=False)
        runners.append(self)
        return original(self, args, *rest, **kwargs)

    compiled = pipec.compile(f)
    ProgramRunner.__call__ = spy
    try:
        for _ in range(3):
            t, y = compiled(x, w)
    finally:
        ProgramRunner.__call__ = original
    torch.testing.assert_close(y, x @ w)
    assert t._base is x and torch.equal(t, x.t())
    for runner in set(runners):
        for _, run in runner.specialized.values():
            returned = run.source.splitlines()[-1].removeprefix("    return [").rstrip("]").split(", ")
            made = {ln.split(" = ")[0].strip() for ln in run.source.splitlines() if "REINTERPRET(" in ln}
            assert not made & set(returned)
