"""Graphs that hold tensor constants of their own (issue 19): `torch.tensor([...])` built in a
forward, or the `torch.tensor([])` transformers' KV cache starts each layer with. Capture makes
each one a graph input (role "buffer"); every path binds its value: pipec.compile,
torch.compile(backend="pipec"), training graphs, exported artifacts and the compile cache."""

import pytest
import torch

import pipec


class WithConstants(torch.nn.Module):
    """An index constant, a scale constant, an empty constant (a KV cache's start) and a literal."""

    def __init__(self, scale=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.scale = scale

    def forward(self, x):
        idx = torch.tensor([0, 2, 5])
        scale = torch.tensor(self.scale)
        past = torch.tensor([])
        y = self.lin(x) * scale
        keys = torch.cat([past.reshape(0, 3), y[:, idx]], dim=0)
        return keys * torch.tensor(0.5) + 1


def inputs():
    torch.manual_seed(0)
    return (torch.randn(4, 8),)


@pytest.mark.parametrize("entry", ["pipec.compile", "torch.compile"])
def test_inference_binds_constants(entry):
    model = WithConstants().eval()
    (x,) = inputs()
    compiled = pipec.compile(model) if entry == "pipec.compile" else torch.compile(model, backend="pipec")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        torch.testing.assert_close(compiled(x + 1), model(x + 1))  # a second call binds them again


def test_training_binds_constants_in_forward_and_backward():
    model = WithConstants()
    twin = WithConstants()
    twin.load_state_dict(model.state_dict())
    (x,) = inputs()
    pipec.compile(model)(x).pow(2).sum().backward()
    twin(x).pow(2).sum().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_cache_hit_binds_this_graphs_constants(tmp_path, monkeypatch):
    """Two models that differ only in a constant's value: the second compile may reuse cached
    stages, but runs with its own constant (the values are bound at compile time, not cached)."""
    monkeypatch.setenv("PIPEC_CACHE_DIR", str(tmp_path / "cache"))
    (x,) = inputs()
    first, second = WithConstants(), WithConstants(scale=tuple(range(10, 18)))
    second.load_state_dict(first.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(pipec.compile(first)(x), first(x))
        torch._dynamo.reset()
        compiled = pipec.compile(second)
        torch.testing.assert_close(compiled(x), second(x))
        torch._dynamo.reset()
        again = pipec.compile(second, aot_cache=False)
        torch.testing.assert_close(again(x), second(x))
        torch._dynamo.reset()
        whole = pipec.compile(second)  # AOTAutograd's cache, whose key holds the values too
        torch.testing.assert_close(whole(x), second(x))
    # keyed by the constants' values, which AOTAutograd's fake mode must not hide from the key
    assert again.pipec_session.cache_hits.get("capture") == 1
    assert compiled.pipec_session.cache_hits.get("aot_autograd", 0) == 0  # not the first model's entry
    assert whole.pipec_session.cache_hits == {"aot_autograd": 1}
    # the constants are not in the IR, so the later stages of the second model were served from
    # the first one's entries, and it still ran with its own constants (checked above)
    report = pipec.explain(WithConstants(scale=tuple(range(20, 28))).eval(), x)
    assert report.cache_hits.get("fusion", 0) >= 1


def test_constant_digest_keys_the_cache(tmp_path):
    """A constant's value is part of the capture key: inlined one-element constants become
    literals of the IR, so two graphs that differ only there must not share an entry."""
    from pipec.cache.keys import graph_module_digest

    def traced(value):
        class M(torch.nn.Module):
            def forward(self, x):
                return x * torch.tensor([value, 2.0])

        return torch.fx.experimental.proxy_tensor.make_fx(M())(torch.randn(2))

    a, b = traced(1.0), traced(3.0)
    x = [torch.randn(2)]
    assert graph_module_digest(a, x) != graph_module_digest(b, x)
    assert graph_module_digest(a, x) == graph_module_digest(traced(1.0), x)


def test_exported_artifact_carries_constants(tmp_path):
    model = WithConstants().eval()
    (x,) = inputs()
    path = tmp_path / "m.pipec"
    pipec.export(model, (x,), str(path))
    loaded = pipec.load(str(path))
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
