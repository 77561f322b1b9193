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


def _body_with_an_unread_write() -> torch.fx.GraphModule:
    """A graph calling a subgraph (as a higher-order op holds an autograd.Function's backward)
    whose in-place `scatter_add_` result nobody reads, as in PhiMoE's router backward."""
    body = torch.fx.Graph()
    x, index, src = body.placeholder("x"), body.placeholder("index"), body.placeholder("src")
    doubled = body.call_function(operator.mul, (x, 2))
    body.call_method("scatter_add_", (doubled, -1, index, src))
    body.output((doubled,))
    top = torch.fx.Graph()
    root = torch.nn.Module()
    root.body = torch.fx.GraphModule(torch.nn.Module(), body)
    args = [top.placeholder(n) for n in ("x", "index", "src")]
    # as Dynamo's graph hands a higher-order op its body: a get_attr node, read by the call
    result = top.call_function(_call_body, (top.get_attr("body"), *args))
    top.output((top.call_function(operator.getitem, (result, 0)),))
    return torch.fx.GraphModule(root, top)


def _call_body(body, *args):
    return body(*args)


def test_an_unread_write_inside_a_called_subgraph_survives():
    """FX's dead-code pass recurses into the bodies a graph names with its own purity test, which
    drops the unread `scatter_add_`; `drop_dead_code` applies `mutates` there too."""
    gm = _body_with_an_unread_write()
    drop_dead_code(gm.graph)
    writes = [n for n in gm.body.graph.nodes if n.target == "scatter_add_"]
    assert len(writes) == 1
    x, index, src = torch.zeros(2, 4), torch.tensor([[1], [3]]), torch.ones(2, 1)
    assert gm(x, index, src)[0].tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
