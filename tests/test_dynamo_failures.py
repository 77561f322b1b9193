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


def three_calls(model) -> tuple[object, list[str]]:
    """pipec.compile(model) called three times, each result checked against eager; returns the
    compiled model and the fallback warnings' messages."""
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    compiled = pipec.compile(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [compiled(x) for _ in range(3)]
    for out in results:
        torch.testing.assert_close(out, model(x))
    return compiled, [str(w.message) for w in caught if issubclass(w.category, PipecFallbackWarning)]


def test_a_function_dynamo_cannot_trace_runs_eagerly_and_its_callees_compile():
    compiled, messages = three_calls(Outer())
    assert len(messages) == 1  # once: Dynamo runs that code eagerly from then on, untraced
    assert "Dynamo could not trace forward (test_dynamo_failures.py" in messages[0]
    assert "no shape function" in messages[0]
    graphs = compiled.pipec_session.graphs
    assert len(graphs) == 1 and graphs[0].kernel_count >= 1  # Inner's sigmoid chain, from the 2nd call
    assert compiled.pipec_session.eager_graphs == 0


@pytest.mark.parametrize("options", [{"fullgraph": True}, {"eager_fallback": False}])
def test_fullgraph_and_no_fallback_keep_dynamos_error(options):
    compiled = pipec.compile(Outer(), **options)
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match="no shape function"):
        compiled(torch.randn(4, 8))


class SeesItIsCompiled(torch.nn.Module):
    """Like transformers' mask builders: another shape when it sees it is being compiled."""

    def forward(self, x):
        return x[:, :2] if torch.compiler.is_compiling() else x


class MixedUp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = SeesItIsCompiled()

    def forward(self, x):
        return plus_one(x) + self.inner(x)  # eager: the shapes agree; a compiled inner: they do not


def test_a_model_that_fails_partly_compiled_runs_wholly_eagerly():
    _, messages = three_calls(MixedUp())
    assert len(messages) == 2, messages  # the code Dynamo could not trace, then the whole model, once
    assert "runs wholly eagerly from now on" in messages[1] and "RuntimeError" in messages[1]


def test_wrong_inputs_still_get_eagers_own_error():
    """Inputs the model itself cannot take fail Dynamo's trace too; after the fallbacks the caller
    gets eager's error, and the model is not switched to eager for good."""
    model = torch.nn.Linear(8, 4)
    compiled = pipec.compile(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            compiled(torch.randn(4, 5))
        torch.testing.assert_close(compiled(torch.randn(4, 8).fill_(1)), model(torch.ones(4, 8)))
    assert compiled.pipec_session.graphs  # the right input was compiled


def _pad_reflect(x, paddings):
    """transformers' EncodecConv1d._pad1d: a graph break on the data-dependent branch, then a
    reflect pad whose right padding is a tensor, which AOTAutograd reads with `.item()`."""
    length = x.shape[-1]
    left, right = paddings
    max_pad = max(left, right)
    extra = 0
    if length <= max_pad:
        extra = max_pad - length + 1
        x = torch.nn.functional.pad(x, (0, extra))
    padded = torch.nn.functional.pad(x, paddings, "reflect")
    return padded[..., :padded.shape[-1] - extra]


def _encodec_padding(x):
    length = x.shape[-1]
    frames = torch.ceil(torch.tensor((length - 4 + 3) / 2 + 1)).to(torch.int64) - 1
    return _pad_reflect(x * 2, (3, frames * 2 + 4 - 3 - length)).sin() + 1


def test_a_data_dependent_op_in_aot_autograd_is_a_graph_break_not_an_eager_graph():
    """AOTAutograd meets a data-dependent `.item()` (DataDependentOutputException) in a graph
    Dynamo traced: pipec lets Dynamo split the graph there, as Inductor does, instead of running the
    whole graph eagerly (EnCodec's and Mimi's convolution padding ran that way)."""
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0))
    compiled = pipec.compile(_encodec_padding)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PipecFallbackWarning)
        got = compiled(x)
    torch.testing.assert_close(got, _encodec_padding(x))
    messages = [str(w.message) for w in caught if issubclass(w.category, PipecFallbackWarning)]
    assert len(messages) == 1 and "DataDependentOutputException" in messages[0] and "splits the graph" in messages[0]
    session = compiled.pipec_session
    assert session.eager_graphs == 0
    # the pad's graph was split: the sine and the add after it are a compiled graph of their own
    assert any(g.op_count == 2 for g in session.graphs[1:]), [(g.name, g.op_count) for g in session.graphs]


@torch._dynamo.allow_in_graph
def _doubled(t):
    return t * 2


def _padding_after_an_allowed_function(x, right):
    return torch.nn.functional.pad(_doubled(x.exp()), (3, right), "reflect").sin()


def test_with_an_allow_in_graph_function_the_graph_runs_eagerly_as_before():
    """Dynamo raises a backend's data-dependent error when the graph holds a function the user
    marked allow_in_graph, instead of splitting the graph: there pipec runs the graph eagerly, with
    its warning, as before."""
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(1))
    compiled = pipec.compile(_padding_after_an_allowed_function)
    with pytest.warns(PipecFallbackWarning, match="runs eagerly"):
        got = compiled(x, torch.tensor(2))
    torch.testing.assert_close(got, _padding_after_an_allowed_function(x, torch.tensor(2)))
    assert compiled.pipec_session.eager_graphs == 1
