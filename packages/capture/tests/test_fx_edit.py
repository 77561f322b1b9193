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
