"""Large column sums split into partial sums and a sum of the partials (split_reductions.py)."""

import pytest
from fusion_graphs import GraphBuilder
from pipec_ir import verify

from pipec_fusion import DefaultHeuristics, fuse_graph
from pipec_fusion.heuristics import NoFusion
from pipec_fusion.split_reductions import MAX_PARTS, parts_for, split_column_sums
from test_recompute_stored import layer_norm_backward


@pytest.mark.parametrize("rows, columns, parts", [
    (4096, 768, 16),     # BERT base's bias gradients: 16 blocks of 256 rows
    (4096, 3072, 4),     # its MLP's: 4 x 3072 columns are enough programs
    (4096, 64, 16),      # at most one part per 256 rows
    (1 << 20, 8, MAX_PARTS),
    (4095, 768, 1),      # too few rows to be worth it
    (4096, 30522, 1),    # a vocabulary's columns are programs enough
    (4100, 16, 4),       # parts divide the rows
])
def test_parts(rows, columns, parts):
    assert parts_for(rows, columns) == parts
    assert rows % parts == 0


def sums(shape, dims, keepdim=False, dtype="bfloat16"):
    g = GraphBuilder("sums")
    x = g.input("x", list(shape), dtype)
    y = g.node("mul", (x, x), list(shape), dtype)
    out = [1 if d in dims else s for d, s in enumerate(shape)] if keepdim else [s for d, s in enumerate(shape) if d not in dims]
    return g.build(g.node("sum", (y,), out, dtype, dims=tuple(dims), keepdim=keepdim))


def test_a_column_sum_becomes_partials_and_their_sum():
    graph = split_column_sums(sums((8, 512, 64), (0, 1), keepdim=True))
    verify(graph)
    by_op = [(n.op, [str(s) for s in n.type.shape], n.type.dtype) for n in graph.nodes]
    assert ("sum", ["16", "64"], "float32") in by_op  # the partials, fp32
    assert ("sum", ["64"], "float32") in by_op
    final = graph.node_map()[graph.outputs[0]]
    assert (final.op, [str(s) for s in final.type.shape], final.type.dtype) == ("reshape", ["1", "1", "64"], "bfloat16")


def test_float64_sums_keep_float64_partials():
    graph = split_column_sums(sums((8, 512, 64), (0, 1), dtype="float64"))
    verify(graph)
    assert {n.type.dtype for n in graph.nodes} == {"float64"}


@pytest.mark.parametrize("shape, dims", [
    ((4096, 64), (1,)),          # a row sum
    ((64, 4096), (0, 1)),        # everything reduced
    ((16, 64), (0,)),            # too small
    ((4096, 8, 64), (0, 2)),     # a reduced dim that is not leading
])
def test_other_sums_are_left_alone(shape, dims):
    graph = sums(shape, dims)
    assert split_column_sums(graph) is graph


def test_layer_norm_backward_column_sums_split_with_their_prologue():
    """The weight and bias gradients' partial kernels compute what they sum from the graph's
    inputs (the recomputed fp32 gradient and x_hat), as the unsplit sums did."""
    plan = fuse_graph(layer_norm_backward(rows=4096, cols=64), DefaultHeuristics())
    parts = [k for k in plan.kernels if any(o.endswith("_part") for o in k.outputs)]
    totals = [k for k in plan.kernels if any(i.endswith("_part") for i in k.inputs)]
    assert len(parts) == 2 and len(totals) == 2
    graph_inputs = {i.name for i in plan.graph.inputs}
    assert all(set(k.inputs) <= graph_inputs for k in parts)
    assert all([str(d) for d in k.domain] == ["16", "256", "64"] for k in parts)
    assert len(plan.kernels) == 5  # the row kernel, and two sums of two kernels each


def test_policy_none_keeps_the_sums_as_captured():
    graph = layer_norm_backward(rows=4096, cols=64)
    plan = fuse_graph(graph, NoFusion())
    assert plan.graph is graph
