"""tanh-GELU written out as arithmetic (transformers' "gelu_new") becomes one `gelu` op
(fold_gelu.py), so a matmul keeps it in its epilogue and cuBLASLt may apply it."""

import math

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from pipec_capture import core_decompositions, lower_graph
from pipec_capture.fold_gelu import fold_tanh_gelu
from pipec_capture.reference import run_graph


def gelu_new(x):  # transformers.activations.NewGELUActivation.forward
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_new_reordered(x):  # the same function, operands of mul/add swapped, the cube as products
    return (1.0 + torch.tanh((x + x * x * x * 0.044715) * 0.7978845608)) * (x * 0.5)


def _trace(fn, *args):
    return make_fx(fn, decomposition_table=core_decompositions())(*args)


def _ops(graph) -> list[str]:
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("fn", [gelu_new, gelu_new_reordered])
def test_the_chain_becomes_one_gelu_and_matches_eager(fn):
    x = torch.randn(6, 10, generator=torch.Generator().manual_seed(0)) * 3
    graph = lower_graph(_trace(fn, x), name="t")
    assert [op for op in _ops(graph) if op not in ("full", "reshape", "expand")] == ["gelu"]
    (out,) = run_graph(graph, [x])
    torch.testing.assert_close(out, fn(x))
    torch.testing.assert_close(out, torch.nn.functional.gelu(x, approximate="tanh"))


def test_a_chain_whose_intermediates_are_read_elsewhere_stays():
    """A training graph saves `tanh` for the backward: folding would compute it twice."""
    def saves_tanh(x):
        t = torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))
        return 0.5 * x * (1.0 + t), t

    gm = _trace(saves_tanh, torch.randn(4, 4))
    assert fold_tanh_gelu(gm) == 0
    assert "gelu" not in _ops(lower_graph(gm, name="t"))


@pytest.mark.parametrize("constant", [0.5, 0.0447, 0.79])
def test_other_constants_are_not_gelu(constant):
    def almost(x):
        c = {0.5: (0.6, 0.044715, 0.7978845608), 0.0447: (0.5, 0.0447, 0.7978845608),
             0.79: (0.5, 0.044715, 0.79)}[constant]
        return c[0] * x * (1.0 + torch.tanh(c[2] * (x + c[1] * torch.pow(x, 3.0))))

    gm = _trace(almost, torch.randn(4, 4))
    assert fold_tanh_gelu(gm) == 0


def test_another_cube_is_not_gelu():
    def squared(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 2.0))))

    assert fold_tanh_gelu(_trace(squared, torch.randn(4, 4))) == 0
