"""`x[mask] = v` with a value shared by every selected row becomes `x.copy_(where(mask, v, x))`
before AOTAutograd (pipec_capture.mask_writes): SpecAugment's training graph compiles instead of
running eagerly, with eager's values and gradients."""

import operator

import pytest
import torch

import pipec
from conftest import dynamo_graph
from pipec.errors import PipecFallbackWarning
from pipec_capture.mask_writes import masked_writes_as_where


class SpecAugment(torch.nn.Module):
    """wav2vec2's time masking: masked frames take one learned vector, then a projection."""

    def __init__(self, width=8):
        super().__init__()
        self.embed = torch.nn.Parameter(torch.randn(width))
        self.proj = torch.nn.Linear(width, width)

    def forward(self, hidden, mask):
        hidden = self.proj(hidden)
        hidden[mask] = self.embed.to(hidden.dtype)
        return torch.tanh(hidden).sum(-1)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(3, 5, generator=g) < 0.4
    mask[0, 0], mask[0, 1] = True, False
    return torch.randn(3, 5, 8, generator=g), mask


def test_the_write_becomes_a_where_written_back_with_example_values():
    torch.manual_seed(0)
    gm = dynamo_graph(SpecAugment(), *_inputs())
    assert masked_writes_as_where(gm) == 1
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert not any(n.target is operator.setitem for n in calls)
    assert any(n.target is torch.where for n in calls) and any(n.target == "copy_" for n in calls)
    # Dynamo's example values on the new nodes (AOTAutograd's cache needs them)
    assert all(isinstance(n.meta.get("example_value"), torch.Tensor) for n in calls)
    assert [n.meta["example_value"].shape for n in calls if n.target is torch.where] == [(3, 5, 8)]


def test_specaugment_trains_compiled_with_eagers_gradients():
    torch.manual_seed(0)
    model = SpecAugment()
    hidden, mask = _inputs()
    model.zero_grad()
    model(hidden, mask).square().sum().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    compiled = pipec.compile(model)
    compiled(hidden, mask).square().sum().backward()
    session = compiled.pipec_session
    assert session.eager_graphs == 0  # before: AOTAutograd could not trace the backward's nonzero
    assert not any("index_put" in op for g in session.graphs for op in (g.extern_ops or ()))
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[name])


def test_a_write_into_a_view_reaches_its_base():
    def f(x, mask, v):
        base = x * 2
        view = base[:, 1:]
        view[mask] = v
        return base + 1

    x, mask, v = torch.randn(4, 6, 3), torch.rand(4, 5) < 0.5, torch.randn(3)
    torch._dynamo.reset()
    torch.testing.assert_close(pipec.compile(f)(x, mask, v), f(x, mask, v))


def test_a_value_per_selected_element_is_left_alone_and_still_right():
    def f(x, y, mask):
        out = x + 0
        out[mask] = y[mask] * 3
        return out

    x, y, mask = torch.randn(4, 5), torch.randn(4, 5), torch.rand(4, 5) < 0.5
    gm = dynamo_graph(f, x, y, mask)
    assert masked_writes_as_where(gm) == 0
    torch._dynamo.reset()
    with pytest.warns(PipecFallbackWarning, match="index_put"):  # an extern call, as before
        torch.testing.assert_close(pipec.compile(f)(x, y, mask), f(x, y, mask))
