"""A function Dynamo cannot trace runs eagerly under `pipec.compile`, with one warning naming it,
while what it calls is still compiled (cli `dynamo_failures.py`); fullgraph keeps the error."""

import warnings

import pytest
import torch

import pipec
from pipec.errors import PipecFallbackWarning


@torch.library.custom_op("pipec_test::plus_one", mutates_args=())
def plus_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@plus_one.register_fake
def _(x):
    # eager runs the op; Dynamo's fake-tensor trace of it fails, as on a shape function torch lacks
    raise RuntimeError("no shape function")


class Inner(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(x) * 3 + x


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(plus_one(torch.relu(x)))


def test_a_function_dynamo_cannot_trace_runs_eagerly_and_its_callees_compile():
    torch.manual_seed(0)
    model, x = Outer(), torch.randn(4, 8)
    compiled = pipec.compile(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = compiled(x), compiled(x)
    torch.testing.assert_close(first, model(x))
    torch.testing.assert_close(second, model(x))
    messages = [str(w.message) for w in caught if issubclass(w.category, PipecFallbackWarning)]
    assert len(messages) == 1  # once: Dynamo runs the function eagerly from then on, untraced
    assert "Dynamo could not trace forward (test_dynamo_failures.py" in messages[0]
    assert "no shape function" in messages[0]
    graphs = compiled.pipec_session.graphs
    assert len(graphs) == 1 and graphs[0].kernel_count >= 1  # Inner's sigmoid chain, compiled
    assert compiled.pipec_session.eager_graphs == 0


@pytest.mark.parametrize("options", [{"fullgraph": True}, {"eager_fallback": False}])
def test_fullgraph_and_no_fallback_keep_dynamos_error(options):
    compiled = pipec.compile(Outer(), **options)
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match="no shape function"):
        compiled(torch.randn(4, 8))
