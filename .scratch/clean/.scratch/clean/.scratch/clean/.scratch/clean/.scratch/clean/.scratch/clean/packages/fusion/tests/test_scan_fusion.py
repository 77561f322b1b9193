"""Scan kernels: one scan with its pointwise prologue and epilogue; everything else stays
apart with a recorded reason (scan_rules.py)."""

import pipec_ir
import pytest
from fusion_graphs import GraphBuilder
from pipec_ir import CompileOptions
from pipec_fusion import preset


def plan(graph, policy="default"):
    p = preset(policy).fuse(graph, CompileOptions())
    assert pipec_ir.loads(pipec_ir.dumps(p)) == p
    return p


def kernel_of(p, node):
    return next(k for k in p.kernels if node in k.nodes)


def reasons(p):
    return {(r.first, r.second): r.reason for r in p.rejected}


def scan(g, x, dim, combine="add"):
    return g.node("scan", (x,), g.shape(x), dim=dim, combine=combine)


def test_prologue_and_epilogue_join_the_scan():
    g = GraphBuilder("cumsum_exp")
    x = g.input("x", [6, 10])
    e = g.pw("exp", x)
    s = scan(g, e, 1)
    y = g.pw("mul", s, x)
    p = plan(g.build(y))
    (k,) = p.kernels
    assert k.kind == "scan" and k.reduce_dims == (1,) and tuple(k.domain) == (6, 10)
    assert set(k.nodes) == {e, s, y} and k.outputs == (y,) and k.inputs == (x,)


def test_none_policy_keeps_the_scan_alone():
    g = GraphBuilder()
    x = g.input("x", [6, 10])
    y = g.pw("neg", scan(g, g.pw("exp", x), 0))
    p = plan(g.build(y), "none")
    assert [k.kind for k in p.kernels] == ["pointwise", "scan", "pointwise"]
    assert p.kernels[1].reduce_dims == (0,)


@pytest.mark.parametrize("policy", ["default", "aggressive"])
def test_reduction_of_a_scan_stays_apart(policy):
    g = GraphBuilder()
    x = g.input("x", [6, 10])
    s = scan(g, x, 1)
    m = g.pw("mul", s, s)
    r = g.reduce("sum", m, (1,))
    p = plan(g.build(r), policy)
    assert kernel_of(p, s) is kernel_of(p, m) and kernel_of(p, r) is not kernel_of(p, s)
    assert "scan kernel fuses only pointwise ops, not a reduction" in reasons(p)[(m, r)]


def test_two_scans_are_two_kernels():
    g = GraphBuilder()
    x = g.input("x", [6, 10])
    s1 = scan(g, x, 1)
    s2 = scan(g, s1, 1, "mul")
    p = plan(g.build(s2), "aggressive")
    assert kernel_of(p, s1) is not kernel_of(p, s2)
    assert reasons(p)[(s1, s2)] == "a scan kernel holds one scan"


def test_reading_a_scan_shifted_is_illegal():
    g = GraphBuilder()
    x = g.input("x", [6, 10])
    s = scan(g, x, 1)
    shifted = g.node("slice", (s,), [6, 9], dim=1, start=1, step=1)
    y = g.pw("neg", shifted)
    p = plan(g.build(y), "aggressive")
    assert kernel_of(p, s) is not kernel_of(p, y)
    assert "would be stored with shape [6, 9]" in reasons(p)[(s, y)]


def test_epilogue_reading_the_scan_transposed_is_illegal():
    g = GraphBuilder()
    x = g.input("x", [8, 8])
    s = scan(g, x, 1)
    y = g.pw("add", g.permute(s, (1, 0)), x)
    p = plan(g.build(y), "aggressive")
    assert kernel_of(p, s) is not kernel_of(p, y)
    assert "reads scan" in reasons(p)[(s, y)] and "another index than its own" in reasons(p)[(s, y)]


def test_a_row_level_broadcast_feeds_the_scan():
    g = GraphBuilder()
    x = g.input("x", [6, 10])
    c = g.input("c", [6, 1])
    d = g.pw("sub", x, g.expand(c, [6, 10]))
    s = scan(g, d, 1, "logaddexp")
    p = plan(g.build(s))
    (k,) = p.kernels
    assert k.kind == "scan" and set(k.inputs) == {x, c}


def test_matmul_output_is_not_a_scan_prologue():
    g = GraphBuilder()
    a = g.input("a", [8, 16])
    w = g.input("w", [16, 8], role="parameter")
    s = scan(g, g.mm(a, w), 1)
    p = plan(g.build(s), "aggressive")
    assert [k.kind for k in p.kernels] == ["matmul", "scan"]
    assert any("not a scan" in r.reason for r in p.rejected)
