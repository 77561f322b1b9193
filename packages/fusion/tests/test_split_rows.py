"""Long sums over few rows split into partials per block and their combine (split_rows.py)."""

import pytest
from fusion_graphs import GraphBuilder
from pipec_ir import verify

from pipec_fusion import DefaultHeuristics, fuse_graph
from pipec_fusion.split_rows import MAX_BLOCKS, plan_row_split, split_row_reductions


@pytest.mark.parametrize("shape, dims, dim, blocks", [
    ((2, 32, 10, 4096), (2, 3), 3, 8),      # SD 1.5's first group norms: 64 rows of 40960
    ((2, 32, 20, 256), (2, 3), 3, 1),       # a 16 x 16 map: rows of 5120 are short enough
    ((1, 4096, 768), (0, 1, 2), 1, MAX_BLOCKS),  # everything summed: one row, split along its tokens
    ((256, 65536), (1,), 1, 1),             # rows enough to fill the GPU
    ((2, 3, 4099), (2,), 2, 1),             # a prime length: no even blocks... and short
    ((4, 32768), (1,), 1, 64),
    ((4, 96, 4096), (1, 2), 2, 16),         # the largest reduced dim is split, blocks of 256
])
def test_plan(shape, dims, dim, blocks):
    split = plan_row_split(shape, dims)
    if blocks == 1:
        assert split is None
        return
    assert (split.dim, split.blocks) == (dim, blocks)
    assert shape[dim] % blocks == 0


def group_stats(shape=(2, 32, 10, 4096), dtype="float32", keepdim=True):
    """mean and rsqrt(var + eps) over the last two dims, as AOTAutograd decomposes a group norm."""
    g = GraphBuilder("group_stats")
    x = g.input("x", list(shape), dtype)
    y = g.node("mul", (x, x), list(shape), dtype, name="y")
    stat = [shape[0], shape[1], 1, 1] if keepdim else [shape[0], shape[1]]
    n = shape[2] * shape[3]
    s = g.node("sum", (y,), stat, dtype, name="s", dims=(2, 3), keepdim=keepdim)
    mean = g.node("div", (s, g.node("full", (), stat, dtype, value=float(n))), stat, dtype, name="mean")
    view = mean if keepdim else g.node("reshape", (mean,), [shape[0], shape[1], 1, 1], dtype)
    sub = g.node("sub", (y, g.node("expand", (view,), list(shape), dtype)), list(shape), dtype, name="dev")
    sq = g.node("mul", (sub, sub), list(shape), dtype, name="sq")
    m2 = g.node("sum", (sq,), stat, dtype, name="m2", dims=(2, 3), keepdim=keepdim)
    var = g.node("div", (m2, g.node("full", (), stat, dtype, value=float(n))), stat, dtype, name="var")
    return g.build(mean, g.node("rsqrt", (var,), stat, dtype, name="rstd"))


@pytest.mark.parametrize("keepdim", [True, False])
def test_welford_pair_reads_its_input_once(keepdim):
    graph = split_row_reductions(group_stats(keepdim=keepdim))
    verify(graph)
    nodes = graph.node_map()
    assert {"dev", "sq"}.isdisjoint(nodes)  # only the variance read them: replaced by the blocks' own
    # the original names keep their values: the combine, reshaped back where the sum kept its dims
    assert (nodes["s"].op, nodes["m2"].op) == (("reshape", "reshape") if keepdim else ("sum", "add"))
    assert nodes["s"].type == group_stats(keepdim=keepdim).node_map()["s"].type
    parts = [n for n in graph.nodes if n.op == "sum" and [str(s) for s in n.type.shape] == ["2", "32", "1", "8", "1"]]
    assert len(parts) == 2 and all(n.attr("dims") == (2, 4) for n in parts)
    plan = fuse_graph(group_stats(keepdim=keepdim), DefaultHeuristics())
    readers = [k for k in plan.kernels if "x" in k.inputs]
    assert len(readers) == 1  # both block sums in one pass over x
    assert [str(d) for d in readers[0].domain] == ["2", "32", "10", "8", "512"]
    assert len(plan.kernels) == 2  # the blocks, then the combine with mean and rstd


def test_a_plain_sum_splits_and_keeps_its_readers():
    g = GraphBuilder("total")
    x = g.input("x", [4, 32768])
    s = g.node("sum", (x,), [4], name="s", dims=(1,), keepdim=False)
    graph = split_row_reductions(g.build(g.node("neg", (s,), [4])))
    verify(graph)
    by_shape = {n.name: [str(d) for d in n.type.shape] for n in graph.nodes if n.op == "sum"}
    assert sorted(by_shape.values()) == [["4"], ["4", "64", "1"]]  # the partials, then the sum itself
    assert graph.node_map()["s"].type == g.build(s).node_map()["s"].type


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_narrow_sums_are_left_alone(dtype):
    graph = group_stats(dtype=dtype)
    assert split_row_reductions(graph) is graph


def test_symbolic_rows_are_left_alone():
    g = GraphBuilder("sym", symbols={"n": 32768})
    x = g.input("x", [4, "n"])
    graph = g.build(g.node("sum", (x,), [4], dims=(1,), keepdim=False))
    assert split_row_reductions(graph) is graph


def test_a_deviation_read_elsewhere_stays():
    """The normalised value (x - mean) read by the output too: kept, the variance still splits."""
    g = GraphBuilder("norm")
    shape = [2, 4, 8, 4096]
    x = g.input("x", shape)
    s = g.node("sum", (x,), [2, 4, 1, 1], name="s", dims=(2, 3), keepdim=True)
    mean = g.node("div", (s, g.node("full", (), [2, 4, 1, 1], value=32768.0)), [2, 4, 1, 1], name="mean")
    dev = g.node("sub", (x, g.node("expand", (mean,), shape)), shape, name="dev")
    sq = g.node("mul", (dev, dev), shape, name="sq")
    m2 = g.node("sum", (sq,), [2, 4, 1, 1], name="m2", dims=(2, 3), keepdim=True)
    graph = split_row_reductions(g.build(dev, m2))
    verify(graph)
    assert "dev" in graph.node_map() and "sq" not in graph.node_map()


def test_a_softmax_sum_after_its_max_stays_whole():
    """sum(exp(x - max(x))) over two rows of 40000: codegen's online softmax reads the row once for
    both reductions; splitting the sum alone would add a pass."""
    g = GraphBuilder("softmax")
    x = g.input("x", [2, 40000])
    peak = g.node("max", (x,), [2, 1], dims=(1,), keepdim=True)
    shifted = g.node("sub", (x, g.node("expand", (peak,), [2, 40000])), [2, 40000])
    total = g.node("sum", (g.node("exp", (shifted,), [2, 40000]),), [2, 1], dims=(1,), keepdim=True)
    graph = g.build(total)
    assert split_row_reductions(graph) is graph
