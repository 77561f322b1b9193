"""Gathers moved below the pointwise math they read (sink_gathers.py), on ATen graphs."""

import torch
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd

from pipec_capture.aot import core_decompositions
from pipec_capture.sink_gathers import sink_gathers

aten = torch.ops.aten


def traced(fn, *inputs):
    """fn's ATen graph as pipec's capture sees it (core decompositions, meta values set)."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=keep, decompositions=core_decompositions())
    torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    return graphs[0]


def targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def gather_sources(gm):
    return [n.args[0] for n in gm.graph.nodes if n.op == "call_function" and n.target is aten.gather.default]


def run_graph(gm, *inputs):
    out = gm(*inputs)
    return out[0] if isinstance(out, (list, tuple)) else out


def test_the_vocabulary_loss_gathers_logits_not_log_probabilities():
    """cross_entropy's nll_loss gathers from y - max - log(sum(exp(y - max))), y = x * 2: after the
    pass the gather reads x itself, and the full-size log-probabilities are no longer computed."""
    g = torch.Generator().manual_seed(0)
    x, t = torch.randn(16, 50, generator=g), torch.randint(0, 50, (16,), generator=g)
    gm = traced(lambda x, t: F.cross_entropy(x * 2, t), x, t)
    before = run_graph(gm, x, t)
    assert sink_gathers(gm) == 1
    (source,) = gather_sources(gm)
    assert source.op == "placeholder"  # x (through x * 2): no longer the log-probabilities
    full_size = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is aten.sub.Tensor
                 and tuple(n.meta["val"].shape) == (16, 50)]
    assert len(full_size) == 1  # x - max, for the row sums; the log-probabilities are gone
    torch.testing.assert_close(run_graph(gm, x, t), before)
    torch.testing.assert_close(before, F.cross_entropy(x * 2, t))


def test_a_gather_of_a_library_result_stays():
    g = torch.Generator().manual_seed(1)
    a, b, i = torch.randn(8, 4, generator=g), torch.randn(4, 6, generator=g), torch.randint(0, 6, (8, 1), generator=g)
    gm = traced(lambda a, b, i: torch.gather(a @ b, 1, i), a, b, i)
    assert sink_gathers(gm) == 0


def test_an_operand_that_does_not_line_up_stops_the_move():
    """y varies along the gathered dim but has another shape than the source (broadcast over
    rows): gathering it would need its own positions, so the gather stays."""
    g = torch.Generator().manual_seed(2)
    x, y, i = torch.randn(8, 6, generator=g), torch.randn(6, generator=g), torch.randint(0, 6, (8, 1), generator=g)
    gm = traced(lambda x, y, i: torch.gather(torch.exp(x) + y, 1, i), x, y, i)
    before = run_graph(gm, x, y, i)
    assert sink_gathers(gm) == 0
    torch.testing.assert_close(run_graph(gm, x, y, i), before)


def test_a_large_gather_keeps_values_other_readers_need():
    """A gather reading as many points as its source does not recompute a value that is stored
    for another reader anyway; a small one does."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 6, generator=g)
    wide, narrow = torch.randint(0, 6, (8, 6), generator=g), torch.randint(0, 6, (8, 1), generator=g)

    def fn(x, i):
        e = torch.exp(x)
        return torch.gather(e, 1, i), e.sum()

    gm = traced(fn, x, wide)
    assert sink_gathers(gm) == 0
    gm = traced(fn, x, narrow)
    before = gm(x, narrow)
    assert sink_gathers(gm) == 1
    for got, want in zip(gm(x, narrow), before):
        torch.testing.assert_close(got, want)
