"""common_values.py: a node repeating an earlier one is dropped before fusion, readers rewired."""

from __future__ import annotations

from fusion_graphs import GraphBuilder
from pipec_ir import CompileOptions, Ref, verify
from pipec_fusion import preset
from pipec_fusion.common_values import merge_common_values


def _layers_with_masks(layers: int = 3):
    """BERT's attention, per layer: the boolean mask made additive (`where(mask, 0, -inf)`, its
    two scalars made again each time) and handed to attention, a library call that names its
    tensor arguments in its attributes."""
    g = GraphBuilder("masks")
    h = g.input("h", (2, 1, 4, 4))
    mask = g.input("mask", (2, 1, 4, 4), "bool")
    for layer in range(layers):
        zero, ninf = g.full(0.0, (2, 1, 4, 4)), g.full(float("-inf"), (2, 1, 4, 4))
        where = g.node("where", (mask, zero, ninf), (2, 1, 4, 4), name=f"where{layer}")
        attn = g.node("extern", (h, where), (2, 1, 4, 4), target="aten.add.Tensor", name=f"attn{layer}",
                      args=(Ref(h), Ref(where)), kwargs=(), reason="library")
        h = g.pw("tanh", attn)
    return g.build(h)


def test_each_layer_reads_the_first_layers_mask():
    graph, dropped = merge_common_values(_layers_with_masks())
    verify(graph)  # every extern's Refs name its (rewired) inputs
    assert [n.name for n in graph.nodes if n.op == "where"] == ["where0"]
    assert dropped["where1"] == dropped["where2"] == "where0"
    for layer in range(3):
        attn = next(n for n in graph.nodes if n.name == f"attn{layer}")
        assert attn.inputs[1] == "where0" and attn.attr("args")[1] == Ref("where0")


def test_fusion_plans_the_graph_without_the_copies_and_none_keeps_it_as_captured():
    graph = _layers_with_masks()
    plan = preset("default").fuse(graph, CompileOptions())
    assert sum(n.op == "where" for n in plan.graph.nodes) == 1
    assert sum(k.kind == "pointwise" for k in plan.kernels) == 1 + 3  # the mask, each layer's tanh
    assert preset("none").fuse(graph, CompileOptions()).graph.nodes == graph.nodes


def _library_call(g, *xs):
    return g.node("extern", xs, g.shape(xs[0]), target="aten.add.Tensor", args=tuple(Ref(x) for x in xs),
                  kwargs=(), reason="library")


def test_library_calls_outputs_and_different_attributes_stay():
    g = GraphBuilder("kept")
    x = g.input("x", (4, 8))
    calls = [g.node("extern", (x,), (4, 8), target="aten.bernoulli.default", args=(Ref(x),), kwargs=(),
                    reason="no lowering") for _ in range(2)]  # a call may draw random numbers
    outs = [g.pw("exp", x) for _ in range(2)]  # two returned tensors: each its own
    sums = [g.reduce("sum", x, (d,)) for d in (0, 1)]  # same op and input, other attributes
    repeats = [g.pw("tanh", x) for _ in range(2)]
    graph, dropped = merge_common_values(g.build(*calls, *outs, *sums, _library_call(g, *repeats)))
    assert dropped == {repeats[1]: repeats[0]}
    assert [n.name for n in graph.nodes] == [*calls, *outs, *sums, repeats[0], graph.nodes[-1].name]


def test_a_repeat_that_pointwise_code_reads_stays_in_its_kernel():
    """A causal mask or a flat index made again for each reader is computed inside each
    reading kernel: sharing it would store it in one and load it in the others."""
    g = GraphBuilder("recomputed")
    x = g.input("x", (4, 8))
    twice = [g.pw("exp", x) for _ in range(2)]
    sums = [g.reduce("sum", g.pw("mul", x, t), (1,)) for t in twice]
    graph, dropped = merge_common_values(g.build(*sums))
    assert not dropped and graph.nodes == g.build(*sums).nodes


def test_a_chain_of_repeats_is_dropped_whole():
    """The second chain repeats the first only up to its inputs: values are compared through
    what they read, and its end, read through a view by a matmul, is dropped."""
    g = GraphBuilder("chains")
    x, w = g.input("x", (4, 8)), g.input("w", (8, 4))
    ends = []
    for _ in range(2):
        v = g.permute(g.pw("exp", x), (1, 0))
        ends.append(g.pw("mul", v, g.full(2.0, (8, 4))))
    outs = [g.mm(g.permute(e, (1, 0)), w) for e in ends]
    graph, dropped = merge_common_values(g.build(g.pw("add", *outs)))
    assert dropped[ends[1]] == ends[0] and len(dropped) == 2  # and the matmul's view of it
    plan = preset("default").fuse(graph, CompileOptions())
    computed = [n for k in plan.kernels for n in k.nodes if n.startswith("mul")]
    assert computed == [ends[0]]  # the second chain is dead
