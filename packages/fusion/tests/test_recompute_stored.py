"""Cheap stored values recomputed by the kernels that read them (recompute_stored.py).

The graph is layer_norm's backward as AOTAutograd writes it: the bf16 output gradient cast to
fp32 feeds the row kernel (the input gradient) and two column sums (bias and weight gradients).
"""

import pytest
from fusion_graphs import GraphBuilder
from pipec_ir import CompileOptions

from pipec_fusion import DefaultHeuristics, Heuristics, fuse_graph, preset

OPTS = CompileOptions()


def layer_norm_backward(rows=16, cols=64, grad_dtype="bfloat16", extra=None):
    g = GraphBuilder("ln_backward")
    gy = g.input("gy", [rows, cols], grad_dtype)
    x = g.input("x", [rows, cols], grad_dtype)
    w = g.input("w", [cols])
    mean, rstd = g.input("mean", [rows, 1]), g.input("rstd", [rows, 1])
    gf = g.node("cast", (gy,), [rows, cols], name="gf")
    xf = g.node("cast", (x,), [rows, cols], name="xf")
    xhat = g.pw("mul", g.pw("sub", xf, g.expand(mean, [rows, cols])), g.expand(rstd, [rows, cols]))
    gw = g.pw("mul", gf, g.expand(g.reshape(w, [1, cols]), [rows, cols]))
    s1 = g.reduce("sum", gw, (1,), keepdim=True)
    s2 = g.reduce("sum", g.pw("mul", gw, xhat), (1,), keepdim=True)
    dx = g.pw("mul", g.pw("sub", g.pw("sub", gw, g.expand(s1, [rows, cols])),
                          g.pw("mul", xhat, g.expand(s2, [rows, cols]))), g.expand(rstd, [rows, cols]))
    gxhat = g.pw(extra or "mul", gf, xhat)
    dw = g.reduce("sum", gxhat, (0,))
    db = g.reduce("sum", gf, (0,))
    return g.build(dx, dw, db)


def kernel_reading(plan, value):
    return [k for k in plan.kernels if value in k.inputs]


def test_column_sums_recompute_the_fp32_gradient_instead_of_reading_it():
    plan = preset("default").fuse(layer_norm_backward(), OPTS)
    row, *columns = [k for k in plan.kernels if k.kind == "reduction"]
    assert len(plan.kernels) == 3 and len(columns) == 2
    assert row.reduce_dims == (1,) and all(k.reduce_dims == (0,) for k in columns)
    # the row kernel stores only the input gradient; the column sums read the bf16 inputs
    assert len(row.outputs) == 1
    for k in columns:
        assert "gy" in k.inputs and "gf" not in k.inputs
        assert not any(n.startswith("gf") for n in row.outputs)
    weight_sum = next(k for k in columns if "x" in k.inputs)
    assert set(weight_sum.inputs) == {"gy", "x", "mean", "rstd"}
    # the copies are nodes of the plan's graph, each in one kernel
    names = {n.name for n in plan.graph.nodes}
    copies = [n for k in columns for n in k.nodes if n.endswith(tuple(f"_rc{i}" for i in range(4)))]
    assert copies and set(copies) <= names


def test_policy_none_and_the_base_class_never_recompute():
    graph = layer_norm_backward()
    plan = preset("none").fuse(graph, OPTS)
    assert plan.graph == graph
    assert Heuristics().recompute_stored(("cast",), 2, 4) is False
    assert DefaultHeuristics().recompute_stored(("cast",), 2, 4) is True


def test_a_value_cheaper_to_read_stays_stored():
    """fp32 gradients: recomputing gf * x_hat reads gy and x (8 bytes) against 4: stored."""
    plan = preset("default").fuse(layer_norm_backward(grad_dtype="float32"), OPTS)
    row = next(k for k in plan.kernels if k.reduce_dims == (1,))
    weight_sum = next(k for k in plan.kernels if k.reduce_dims == (0,) and "x" not in k.inputs
                      and "gy" not in k.inputs)
    assert weight_sum.inputs[0] in row.outputs


@pytest.mark.parametrize("op", ["atan2", "pow"])
def test_costly_ops_are_not_recomputed(op):
    plan = preset("default").fuse(layer_norm_backward(extra=op), OPTS)
    row = next(k for k in plan.kernels if k.reduce_dims == (1,))
    assert len(row.outputs) == 2  # the input gradient and gf (op) x_hat, read by the weight's sum


def test_the_pass_leaves_graphs_without_candidates_alone():
    g = GraphBuilder("plain")
    x = g.input("x", [8, 16])
    y = g.pw("exp", x)
    graph = g.build(y, g.reduce("sum", y, (0,)))
    plan = fuse_graph(graph, DefaultHeuristics())
    assert plan.graph is graph


def test_the_second_pass_reuses_the_first_pass_legality_and_plans_the_same(monkeypatch, check_memos):
    """check_memo.py: the pass after the rewrite takes every group it checked before from the
    memo, and the plan is the one checking everything again gives."""
    from pipec_fusion import engine

    graph = layer_norm_backward()
    with_memo = preset("default").fuse(graph, OPTS)
    (memo,) = check_memos
    assert memo.hits > 0  # the rewrite left most groups as they were
    monkeypatch.setattr(engine, "CheckMemo", lambda: None)  # every group checked in every pass
    assert with_memo == preset("default").fuse(graph, OPTS)


def test_a_value_a_gather_reads_is_no_candidate(monkeypatch):
    """A take's source must come from memory, so a cast that a take gathers from (a rotary
    table's cast, read by the cat of rotate_half) is never copied for it: no second fusion
    pass for a copy that could not land."""
    from pipec_fusion import engine

    g = GraphBuilder("gathered_cast")
    x = g.input("x", [16, 64], "bfloat16")
    idx = g.input("idx", [16, 64], "int64")
    xf = g.node("cast", (x,), [16, 64], name="xf")
    s = g.reduce("sum", xf, (1,), keepdim=True)
    taken = g.node("take", (xf, idx), [16, 64], name="taken")
    graph = g.build(s, g.pw("mul", taken, g.full(2.0, [16, 64])))
    passes = []
    real = engine._fuse_once
    monkeypatch.setattr(engine, "_fuse_once", lambda *a, **k: passes.append(1) or real(*a, **k))
    plan = fuse_graph(graph, DefaultHeuristics())
    assert plan.graph is graph and len(passes) == 1
    assert any("xf" in k.outputs for k in plan.kernels)  # stored, for the take to read



def residual_then_sums(rows=8, cols=64, op="div"):
    """A ResNet block's end as SD's UNet has it: the bf16 residual sum (with a `div` by the output
    scale, no cheap op to recompute) is kept for the skip path, an output here, and its fp32 cast
    feeds sums in two kernels: over rows (with the producer) and over columns (a kernel of its own)."""
    g = GraphBuilder("residual_sums")
    a, b = g.input("a", [rows, cols], "bfloat16"), g.input("b", [rows, cols], "bfloat16")
    scale = g.node("full", (), [rows, cols], "bfloat16", value=1.0)
    total = g.node(op, (g.node("add", (a, b), [rows, cols], "bfloat16"), scale),
                   [rows, cols], "bfloat16", name="total")
    wide = g.node("cast", (total,), [rows, cols], name="wide")
    return g.build(total, g.reduce("sum", wide, (1,), keepdim=True), g.reduce("sum", wide, (0,)))


def test_a_cast_of_a_value_its_kernel_stores_anyway_is_read_from_that_value():
    """The producer stores the bf16 sum for the skip path: the column sum reads it (2 bytes) and
    widens it itself, where it read the fp32 cast (4 bytes), which the producer no longer stores."""
    plan = preset("default").fuse(residual_then_sums(), OPTS)
    producer = next(k for k in plan.kernels if "total" in k.outputs)
    assert not any(o.startswith("wide") for o in producer.outputs)
    (column,) = [k for k in plan.kernels if k.kind == "reduction" and k.reduce_dims == (0,)]
    assert column is not producer and column.inputs == ("total",)


def gathered_then_copied(rows=8, cols=64):
    """SD's up-block cat: a gather (no cone to recompute) whose bf16 value is stored as
    identity(permute(permute(x))) (for the shortcut convolution there, an output here), placed
    after the sums that read its fp32 cast, as graph order has it in SD."""
    g = GraphBuilder("gathered_copied")
    x, idx = g.input("x", [rows, cols], "bfloat16"), g.input("idx", [rows, cols], "int64")
    joined = g.node("take", (x, idx), [rows, cols], "bfloat16", name="joined")
    wide = g.node("cast", (joined,), [rows, cols], name="wide")
    row = g.reduce("sum", wide, (1,), keepdim=True)
    column = g.reduce("sum", wide, (0,))
    there = g.permute(g.permute(joined, (1, 0)), (1, 0))
    kept = g.node("identity", (there,), [rows, cols], "bfloat16", name="kept")
    return g.build(row, column, kept)


def test_a_cast_reads_the_store_that_holds_its_operand():
    """The column sum reads `kept` (bf16), which holds the gather's elements, and widens it; the
    fp32 cast is no longer stored. `kept` moves up in graph order to come before the sum."""
    plan = preset("default").fuse(gathered_then_copied(), OPTS)
    producer = next(k for k in plan.kernels if "kept" in k.outputs)
    assert not any(o.startswith("wide") for o in producer.outputs)
    (column,) = [k for k in plan.kernels if k.kind == "reduction" and k.reduce_dims == (0,)]
    assert column.inputs == ("kept",)
    names = [n.name for n in plan.graph.nodes]
    assert names.index("kept") < min(names.index(n) for n in column.nodes)


def test_copies_join_only_their_readers_kernel():
    """The copy of the cast reads a store of the kernel it came from: without pins fusion would
    merge it back there first and the rewrite would be dropped (engine `_stray_copies`)."""
    from pipec_fusion.engine import _stray_copies
    from pipec_fusion.legality import Group

    pins = {"wide_rc0": (0, frozenset({"sum_5"}))}
    copy, reader, home = (Group("pointwise", frozenset({"wide_rc0"}), (8, 64)),
                          Group("reduction", frozenset({"sum_5"}), (8, 64), (0,)),
                          Group("reduction", frozenset({"total", "sum_4"}), (8, 64), (1,)))
    assert _stray_copies(pins, copy, home) and not _stray_copies(pins, copy, reader)
    assert not _stray_copies(pins, home, copy)  # a group with other members is free
