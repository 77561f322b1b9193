"""fx_edit.drop_dead_code: dead code goes, in-place writes stay, in Dynamo graphs too (whose
in-place methods FX's own purity test does not know)."""

import operator

import torch

from pipec_capture.fx_edit import drop_dead_code, mutates


def _graph_with_writes() -> tuple[torch.fx.Graph, dict]:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y")
    nodes = {
        "dead_pure": g.call_method("mul", (x, 2)),
        "copy_method": g.call_method("copy_", (g.call_function(operator.getitem, (x, 0)), y)),
        "setitem": g.call_function(operator.setitem, (x, 1, y)),
        "inplace_function": g.call_function(torch.Tensor.add_, (x, y)),
        "aten_inplace": g.call_function(torch.ops.aten.mul_.Tensor, (x, y)),
        "dunder": g.call_method("__add__", (x, y)),
        "vmap_level": g.call_function(torch._functorch.predispatch._vmap_decrement_nesting, ()),
    }
    g.output(g.call_method("relu", (y,)))
    return g, nodes


def test_in_place_writes_survive_and_dead_pure_code_goes():
    g, nodes = _graph_with_writes()
    assert [name for name, n in nodes.items() if mutates(n)] == [
        "copy_method", "setitem", "inplace_function", "aten_inplace", "vmap_level"]
    drop_dead_code(g)
    left = set(g.nodes)
    assert nodes["dead_pure"] not in left and nodes["dunder"] not in left
    for name in ("copy_method", "setitem", "inplace_function", "aten_inplace", "vmap_level"):
        assert nodes[name] in left, name
    # the view the in-place copy writes through stays with it
    assert nodes["copy_method"].args[0] in left


def test_fx_alone_drops_the_in_place_method():
    """What the helper is for: FX's own test calls a dead `copy_` method pure."""
    g, nodes = _graph_with_writes()
    g.eliminate_dead_code()
    assert nodes["copy_method"] not in set(g.nodes)


class ScaledRouter(torch.autograd.Function):
    """PhiMoE's router multiplier in small: its backward writes in place (`scatter_add_`) and
    never reads the result of the write."""

    @staticmethod
    def forward(ctx, scores, index):
        ctx.save_for_backward(scores, index)
        return scores * 2

    @staticmethod
    def backward(ctx, grad):
        scores, index = ctx.saved_tensors
        expanded = scores * grad
        expanded.scatter_add_(-1, index, grad.gather(-1, index))
        return expanded, None


def routed(scores, index):
    return ScaledRouter.apply(scores, index).sum(-1)


def test_an_autograd_functions_in_place_backward_survives():
    """FX's dead-code pass recurses into a higher-order op's bodies with its own test, which drops
    the backward's `scatter_add_`; `drop_dead_code` applies `mutates` there too."""
    from conftest import dynamo_graph

    scores, index = torch.randn(4, 6, requires_grad=True), torch.tensor([[1], [0], [5], [2]])
    gm = dynamo_graph(routed, scores, index)
    bodies = [m for m in gm.children() if isinstance(m, torch.fx.GraphModule)]
    writes = lambda: sum(1 for b in bodies for n in b.graph.find_nodes(op="call_method", target="scatter_add_"))  # noqa: E731
    assert writes() == 1
    drop_dead_code(gm.graph)
    gm.recompile()
    assert writes() == 1
    expected = torch.autograd.grad(routed(scores, index).sum(), scores)[0]
    got = torch.autograd.grad(gm(scores, index)[0].sum(), scores)[0]
    torch.testing.assert_close(got, expected)
