"""Scatter kernels (docs/IR.md, `scatter`): what fuses into them and what does not."""

import pytest
from fusion_graphs import GraphBuilder
from pipec_ir import CompileOptions

from pipec_fusion import preset

OPTS = CompileOptions()


def _embedding_backward(reuse_grad=False):
    """zeros [7, 4] with grad rows [6, 4] * 2 added at positions token * 4 + column."""
    b = GraphBuilder("emb_bw")
    grad = b.input("grad", [6, 4])
    token = b.input("token", [6, 1], dtype="int64")
    zeros = b.node("full", (), [7, 4], name="zeros", value=0.0)
    scaled = b.node("mul", (grad, b.full(2.0, [6, 4])), [6, 4], name="scaled")
    row = b.node("mul", (b.expand(token, [6, 4]), b.node("full", (), [6, 4], "int64", value=4)), [6, 4], "int64")
    col = b.node("iota", (), [6, 4], "int64", dim=1, start=0, step=1)
    pos = b.node("add", (row, col), [6, 4], "int64", name="pos")
    out = b.node("scatter", (zeros, pos, scaled), [7, 4], reduce="sum", name="scatter")
    user = b.pw("relu", out)
    outputs = [user, scaled] if reuse_grad else [user]
    return b.build(*outputs)


def test_producers_fuse_into_the_scatter_and_readers_do_not():
    plan = preset("default").fuse(_embedding_backward(), OPTS)
    scatter = [k for k in plan.kernels if k.kind == "scatter"]
    assert len(scatter) == 1
    (k,) = scatter
    assert {"zeros", "scaled", "pos", "scatter"} <= set(k.nodes)  # zeros (init) and the prologue
    assert k.inputs == ("grad", "token") and k.outputs == ("scatter",) and tuple(map(int, k.domain)) == (6, 4)
    assert [r.reason for r in plan.rejected if "scatter" in r.first] == [
        "a scatter's result is complete only after every program instance ran: its readers start a new kernel"]


def test_a_prologue_value_read_elsewhere_stays_out():
    plan = preset("default").fuse(_embedding_backward(reuse_grad=True), OPTS)
    (k,) = [k for k in plan.kernels if k.kind == "scatter"]
    assert "scaled" not in k.nodes and "scaled" in k.inputs
    assert any("read outside the scatter kernel" in r.reason for r in plan.rejected)


@pytest.mark.parametrize("policy", ["none", "aggressive"])
def test_every_policy_keeps_the_scatter_its_own_kernel_kind(policy):
    plan = preset(policy).fuse(_embedding_backward(), OPTS)
    assert sum(k.kind == "scatter" for k in plan.kernels) == 1
