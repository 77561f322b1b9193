import pipec_ir
import pytest
from fusion_graphs import (
    GraphBuilder, broadcast_producer, diamond_through_mm, layer_norm, linear_gelu, pointwise_chain,
    reductions_over_different_dims, softmax, two_independent,
)
from pipec_ir import CompileOptions, Dtype, Ref, Registry

from pipec_fusion import (
    DefaultHeuristics, GroupInfo, Heuristics, check_group, fuse_graph, fusion_from_heuristics, preset,
)
from pipec_fusion.analysis import GraphAnalysis
from pipec_fusion.legality import Group

OPTS = CompileOptions()
ALL_GRAPHS = [pointwise_chain, softmax, layer_norm, linear_gelu, diamond_through_mm,
              reductions_over_different_dims, two_independent, broadcast_producer]


def fuse(graph, policy="default"):
    return preset(policy).fuse(graph, OPTS)


def kernels_of(plan, kind=None):
    return [k for k in plan.kernels if kind is None or k.kind == kind]


def rejected_reason(plan, first, second):
    reasons = [r.reason for r in plan.rejected if (r.first, r.second) == (first, second)]
    assert len(reasons) == 1, plan.rejected
    return reasons[0]


def test_pointwise_chain_is_one_kernel():
    plan = fuse(pointwise_chain())
    (k,) = plan.kernels
    assert k.kind == "pointwise"
    assert k.name == "pipec_fused_exp_mul_relu_0"
    assert k.inputs == ("x",)
    assert k.outputs == ("relu_3",)
    assert k.nodes == ("exp_0", "full_1", "mul_2", "relu_3")
    assert [str(s) for s in k.domain] == ["8", "16"]
    assert len(plan.fusions) == 3
    assert all(f.kernel == k.name and f.kind == "vertical" for f in plan.fusions)
    assert plan.policy == "default"


def test_softmax_one_reduction_kernel_under_default():
    graph = softmax()
    plan = fuse(graph)
    (k,) = plan.kernels
    assert k.kind == "reduction"
    assert k.reduce_dims == (1,)
    assert [str(s) for s in k.domain] == ["s0", "32"]
    assert k.inputs == ("x",)
    assert k.outputs == (graph.outputs[0],)
    assert "expand_1" in k.nodes and "expand_5" in k.nodes  # views read through are listed
    assert list(k.nodes) == [n.name for n in graph.nodes]
    assert k.name.startswith("pipec_fused_max_sub_exp_sum_")


def test_softmax_under_none_is_one_kernel_per_compute_node():
    plan = fuse(softmax(), "none")
    assert len(plan.kernels) == 5
    assert not plan.fusions
    reasons = {(r.first, r.second): r.reason for r in plan.rejected}
    assert reasons.pop(("exp_3", "div_6")) == "would create a cycle through pipec_sum_3"  # legality first
    assert set(reasons.values()) == {"heuristics: policy 'none' does not fuse"}
    assert len(reasons) == 4
    names = [k.name for k in plan.kernels]
    assert names == ["pipec_max_0", "pipec_sub_1", "pipec_exp_2", "pipec_sum_3", "pipec_div_4"]
    sub = plan.kernels[1]
    assert sub.inputs == ("x", "max_0")  # the expand view is indexed through, never an input
    assert sub.nodes == ("expand_1", "sub_2")


def test_layer_norm_is_one_kernel():
    plan = fuse(layer_norm())
    (k,) = plan.kernels
    assert k.kind == "reduction" and k.reduce_dims == (1,)
    assert k.inputs == ("x", "weight", "bias")
    assert len(k.outputs) == 1


def test_matmul_bias_gelu_is_one_matmul_kernel_with_its_epilogue():
    plan = fuse(linear_gelu())
    assert [k.kind for k in plan.kernels] == ["view", "matmul"]
    view, mm = plan.kernels
    assert view.name == "pipec_view_permute_0"
    assert view.nodes == ("permute_0",) and view.inputs == ("weight",) and view.outputs == ("permute_0",)
    assert mm.name == "pipec_fused_mm_add_gelu_1"
    assert mm.nodes == ("mm_1", "reshape_2", "expand_3", "add_4", "gelu_5")
    assert mm.inputs == ("x", "permute_0", "bias") and mm.outputs == ("gelu_5",)
    assert [str(s) for s in mm.domain] == ["8", "32"]
    # the pointwise chain first, then the chain into the GEMM's epilogue (epilogue merges come last)
    assert [(f.first, f.second) for f in plan.fusions] == [(("add_4",), ("gelu_5",)), (("mm_1",), ("add_4", "gelu_5"))]
    assert all(f.kernel == mm.name for f in plan.fusions)


def test_matmul_epilogue_never_under_none():
    plan = fuse(linear_gelu(), "none")
    assert [k.kind for k in plan.kernels] == ["view", "matmul", "pointwise", "pointwise"]
    assert rejected_reason(plan, "mm_1", "add_4") == "heuristics: policy 'none' does not fuse"


def test_diamond_cycle_is_rejected_with_reason():
    plan = fuse(diamond_through_mm(), "none")
    assert len(plan.kernels) == 3
    assert rejected_reason(plan, "relu_0", "add_2") == "would create a cycle through pipec_mm_1"
    relu = plan.kernels[0]
    assert relu.outputs == ("relu_0",)


def test_diamond_add_joins_the_matmul_epilogue_but_the_operand_does_not():
    plan = fuse(diamond_through_mm())
    relu, mm = plan.kernels
    assert mm.kind == "matmul" and mm.nodes == ("mm_1", "add_2") and mm.inputs == ("relu_0", "w")
    assert relu.outputs == ("relu_0",)
    assert rejected_reason(plan, "relu_0", "mm_1") == \
        "relu_0 is an operand of matmul mm_1: a matmul kernel fuses only its epilogue"


def _mm_then(*ops, out_mm=False, n=8, k=16, m=8):
    g = GraphBuilder("mm_then")
    x = g.input("x", [n, k])
    w = g.input("w", [k, m], role="parameter")
    y = mm = g.mm(x, w)
    for op in ops:
        y = g.pw(op, y) if op != "add" else g.pw("add", y, g.input("r", [n, m]))
    return g.build(y, mm) if out_mm else g.build(y)


def test_two_linears_each_keep_their_own_epilogue():
    g = GraphBuilder("mlp")
    x = g.input("x", [8, 16])
    w1, w2 = g.input("w1", [16, 32], role="parameter"), g.input("w2", [32, 16], role="parameter")
    h = g.pw("silu", g.mm(x, w1))
    y = g.pw("relu", g.mm(h, w2))
    plan = fuse(g.build(y))
    assert [k.name for k in plan.kernels] == ["pipec_fused_mm_silu_0", "pipec_fused_mm_relu_1"]
    assert plan.kernels[0].outputs == ("silu_1",)  # stored: the second product reads it
    assert rejected_reason(plan, "silu_1", "mm_2") == "a matmul kernel holds one matmul"


def test_product_needed_elsewhere_is_stored_by_the_matmul_kernel():
    plan = fuse(_mm_then("relu", "add", out_mm=True))
    (k,) = plan.kernels
    assert k.kind == "matmul" and k.outputs == ("mm_0", "add_2") and k.inputs == ("x", "w", "r")


def test_epilogue_ops_outside_the_default_list_wait_for_aggressive():
    plan = fuse(_mm_then("relu", "sin"))  # relu and sin are one chain first: no epilogue takes sin
    assert [k.nodes for k in plan.kernels] == [("mm_0",), ("relu_1", "sin_2")]
    assert rejected_reason(plan, "mm_0", "relu_1") == \
        "heuristics: policy 'default' keeps sin out of matmul epilogues (policy 'aggressive' does not)"
    (k,) = fuse(_mm_then("relu", "sin"), "aggressive").kernels
    assert k.kind == "matmul" and k.nodes == ("mm_0", "relu_1", "sin_2")


def test_residual_add_after_a_linear_joins_the_next_layer_norm_not_the_epilogue():
    """x + Linear(x) -> LayerNorm: bias and residual adds go into the LayerNorm kernel (which reads
    the product and writes the sum it needs anyway); the GEMM keeps no epilogue, so cuBLAS needs
    no pointwise pass after it."""
    g = GraphBuilder("residual_norm")
    n, m = 8, 32
    x = g.input("x", [n, m])
    w = g.input("weight", [m, m], role="parameter")
    b = g.input("bias", [m], role="parameter")
    y = g.pw("add", g.mm(x, g.permute(w, (1, 0))), g.expand(g.reshape(b, [1, m]), [n, m]))
    h = g.pw("add", x, y)
    mean = g.pw("mul", g.reduce("sum", h, (1,), keepdim=True), g.full(1.0 / m, [n, 1]))
    d = g.pw("sub", h, g.expand(mean, [n, m]))
    plan = fuse(g.build(d, h))
    kinds = {k.kind: k for k in plan.kernels}
    assert [n for n in kinds["matmul"].nodes if not n.startswith(("permute", "reshape", "expand"))] == ["mm_1"]
    reduction = kinds["reduction"]
    assert {"add_4", "add_5"} <= set(reduction.nodes) and "add_5" in reduction.outputs
    assert rejected_reason(plan, "mm_1", "add_4") == "a matmul epilogue holds only pointwise ops, not a reduction"


def test_reduction_after_matmul_stays_apart():
    g = GraphBuilder("mm_sum")
    x, w = g.input("x", [8, 16]), g.input("w", [16, 8])
    s = g.reduce("sum", g.mm(x, w), (1,))
    plan = fuse(g.build(s))
    assert [k.kind for k in plan.kernels] == ["matmul", "reduction"]
    assert rejected_reason(plan, "mm_0", "sum_1") == "a matmul epilogue holds only pointwise ops, not a reduction"


def test_epilogue_reading_the_product_transposed_is_illegal():
    g = GraphBuilder("mm_t")
    x, w = g.input("x", [8, 8]), g.input("w", [8, 8])
    p = g.mm(x, w)
    y = g.pw("add", p, g.permute(p, (1, 0)))
    plan = fuse(g.build(y), "aggressive")
    assert [k.kind for k in plan.kernels] == ["matmul", "pointwise"]
    assert rejected_reason(plan, "mm_0", "add_2").startswith("add_2 reads matmul mm_0 at another index than its own")


def test_epilogue_over_another_domain_is_illegal():
    g = GraphBuilder("mm_bcast")
    x, w = g.input("x", [8, 16]), g.input("w", [16, 1])
    y = g.pw("add", g.expand(g.mm(x, w), [8, 4]), g.input("r", [8, 4]))
    plan = fuse(g.build(y))
    assert rejected_reason(plan, "mm_0", "add_2") == \
        "epilogue domain [8, 4] is not the matmul's output [8, 1] nor a contiguous reshape of it"


def test_reductions_over_different_dims_not_merged():
    plan = fuse(reductions_over_different_dims())
    assert [k.kind for k in plan.kernels] == ["reduction", "reduction"]
    assert rejected_reason(plan, "sub_2", "sum_3") == "reduction over different dims (1,) and (0,)"
    first = plan.kernels[0]
    assert first.outputs == ("sub_2",)  # stored at row level for the other reduction


def test_horizontal_fusion_only_under_aggressive():
    assert len(fuse(two_independent()).kernels) == 2
    plan = fuse(two_independent(), "aggressive")
    (k,) = plan.kernels
    assert set(k.outputs) == {"exp_0", "sin_1"}
    assert [f.kind for f in plan.fusions] == ["horizontal"]


def test_default_fuses_independent_scalar_kernels_only():
    """Independent 0-d groups (an optimizer's step count per parameter) are one kernel under
    `default`; independent groups of any other domain stay apart (not even proposed)."""
    g = GraphBuilder("scalars")
    counts = [g.pw("add", g.input(f"step{i}", []), g.input(f"one{i}", [])) for i in range(4)]
    plan = fuse(g.build(*counts))
    (k,) = plan.kernels
    assert set(k.outputs) == set(counts)
    assert {f.kind for f in plan.fusions} == {"horizontal"}
    assert len(fuse(two_independent()).kernels) == 2


def test_broadcast_recompute_only_under_aggressive():
    plan = fuse(broadcast_producer())
    assert len(plan.kernels) == 2
    assert "aggressive" in rejected_reason(plan, "exp_0", "add_2")
    plan = fuse(broadcast_producer(), "aggressive")
    (k,) = plan.kernels
    assert k.inputs == ("c", "x") and k.outputs == ("add_2",)


def test_broadcast_literal_is_recomputed_under_default():
    g = GraphBuilder("lit")
    x = g.input("x", [4, 8])
    y = g.pw("add", x, g.expand(g.full(1.0, [4, 1]), [4, 8]))
    plan = fuse(g.build(y))
    assert len(plan.kernels) == 1


def test_cheap_cast_of_a_small_broadcast_input_is_recomputed_under_default():
    """A bf16 layer_norm weight cast to fp32 and read by every row: recomputed in the row
    kernel (policy 'default'), not a kernel of its own; an exp of it is not cheap."""
    def graph(op, rows):
        g = GraphBuilder("castw")
        x = g.input("x", [rows, 32])
        w = g.input("w", [32], role="parameter")
        y = g.pw("mul", x, g.expand(g.reshape(g.pw(op, w), [1, 32]), [rows, 32]))
        return g.build(y)

    assert len(fuse(graph("cast", 16)).kernels) == 1
    plan = fuse(graph("exp", 16))
    assert len(plan.kernels) == 2
    assert "aggressive" in rejected_reason(plan, "exp_0", "mul_3")
    # 8 rows: few times larger, and the cast has no other reader: computed per row too
    # (few_times_broadcast), the kernel and the fp32 copy's write go
    assert len(fuse(graph("cast", 8)).kernels) == 1



@pytest.mark.parametrize("make", ALL_GRAPHS)
def test_kernel_counts_none_default_aggressive(make):
    n, d, a = (len(fuse(make(), p).kernels) for p in ("none", "default", "aggressive"))
    assert n >= d >= a


def test_kernel_counts_strict_on_a_model():
    g = GraphBuilder("model", {"s0": 4})
    x = g.input("x", ["s0", 16])
    w = g.input("w", [16, 16], role="parameter")
    h = g.pw("relu", g.mm(x, w))
    _, y = softmax(g, x=h, out=False)
    z = g.pw("sigmoid", x)
    graph = g.build(y, z)
    n, d, a = (len(fuse(graph, p).kernels) for p in ("none", "default", "aggressive"))
    assert n > d >= a


@pytest.mark.parametrize("policy", ["none", "default", "aggressive"])
@pytest.mark.parametrize("make", ALL_GRAPHS)
def test_plans_verify_and_round_trip(make, policy):
    plan = fuse(make(), policy)
    pipec_ir.verify(plan)
    again = pipec_ir.loads(pipec_ir.dumps(plan))
    assert again == plan
    assert pipec_ir.digest(again) == pipec_ir.digest(plan)
    assert len({k.name for k in plan.kernels}) == len(plan.kernels)
    assert pipec_ir.format_document(plan)


def test_plan_is_deterministic():
    assert pipec_ir.dumps(fuse(layer_norm())) == pipec_ir.dumps(fuse(layer_norm()))


def test_every_stored_output_has_the_kernel_shape():
    for make in ALL_GRAPHS:
        for policy in ("none", "default", "aggressive"):
            plan = fuse(make(), policy)
            types = plan.graph.types()
            for k in plan.kernels:
                for o in k.outputs:
                    shape = tuple(types[o].shape)
                    if k.kind == "pointwise":
                        assert shape == tuple(k.domain)
                    if k.kind == "reduction":
                        keep = tuple(1 if d in k.reduce_dims else s for d, s in enumerate(k.domain))
                        drop = tuple(s for d, s in enumerate(k.domain) if d not in k.reduce_dims)
                        assert shape in (tuple(k.domain), keep, drop)


class NoExp(DefaultHeuristics):
    name = "no-exp"

    def score(self, first: GroupInfo, second: GroupInfo, kind: str):
        if "exp" in first.ops or "exp" in second.ops:
            return None
        return super().score(first, second, kind)

    def why_not(self, first, second, kind):
        return "heuristics: exp stays alone"


def test_custom_heuristics_change_the_plan():
    stage = fusion_from_heuristics(NoExp(), "no-exp")
    plan = stage.fuse(pointwise_chain(), OPTS)
    assert plan.policy == "no-exp"
    assert [k.name for k in plan.kernels] == ["pipec_exp_0", "pipec_fused_mul_relu_1"]
    assert rejected_reason(plan, "exp_0", "mul_2") == "heuristics: exp stays alone"


def test_base_heuristics_never_fuse():
    plan = fuse_graph(pointwise_chain(), Heuristics())
    assert len(plan.kernels) == 4


def test_reduction_read_at_another_row_is_illegal():
    g = GraphBuilder("transposed")
    x = g.input("x", [8, 8])
    s = g.reduce("sum", x, (1,))
    t = g.expand(g.reshape(s, [1, 8]), [8, 8])  # row i reads s[j]
    y = g.pw("add", x, t)
    plan = fuse(g.build(y), "aggressive")
    assert len(plan.kernels) == 2
    assert "another row" in rejected_reason(plan, "sum_0", "add_3")


def test_reduction_epilogue_without_keepdim():
    g = GraphBuilder("mean")
    x = g.input("x", [8, 16])
    s = g.reduce("sum", x, (1,))
    m = g.pw("mul", s, g.full(1 / 16, [8]))
    y = g.pw("sub", x, g.expand(g.reshape(m, [8, 1]), [8, 16]))
    plan = fuse(g.build(m, y))
    (k,) = plan.kernels
    assert k.outputs == ("mul_2", "sub_5")  # outer level [8] and row level [8, 16]


def test_multi_result_extern_and_view_output():
    g = GraphBuilder("ext")
    x = g.input("x", [4, 8])
    a = g.pw("relu", x)
    ext = g.node("extern", (a,), [], dtype="tuple", target="aten.sort.default",
                 args=(Ref(a),), kwargs=(("dtype", Dtype("float32")),), reason="no lowering",
                 results=((("4", "8"), "float32"), (("4", "8"), "int64")))
    v0 = g.node("getitem", (ext,), [4, 8], index=0)
    g.node("getitem", (ext,), [4, 8], dtype="int64", index=1)
    y = g.pw("exp", v0)
    t = g.permute(y, (1, 0))
    graph = g.build(t, y)
    plan = fuse(graph)
    kinds = {k.kind: k for k in plan.kernels}
    e = kinds["extern"]
    assert e.name.startswith("pipec_extern_sort_")
    assert e.nodes == ("extern_1", "getitem_2", "getitem_3")
    assert e.outputs == ("getitem_2", "getitem_3") and e.inputs == ("relu_0",)
    view = kinds["view"]
    assert view.inputs == ("exp_4",) and view.outputs == ("permute_5",)
    assert [k.kind for k in plan.kernels] == ["pointwise", "extern", "pointwise", "view"]
    assert "runs as a library call" in rejected_reason(plan, "relu_0", "extern_1")


def test_view_chain_read_by_matmul_gets_view_kernels():
    g = GraphBuilder("chain_mm")
    x = g.input("x", [4, 8])
    w = g.input("w", [2, 8, 4])
    e = g.pw("exp", w)
    wt = g.reshape(g.permute(e, (1, 0, 2)), [8, 8])
    y = g.mm(x, wt)
    plan = fuse(g.build(y))
    assert [k.kind for k in plan.kernels] == ["pointwise", "view", "view", "matmul"]
    assert plan.kernels[1].inputs == ("exp_0",) and plan.kernels[2].inputs == ("permute_1",)
    assert plan.kernels[0].outputs == ("exp_0",)


def test_dead_nodes_are_dropped():
    g = GraphBuilder("dead")
    x = g.input("x", [4])
    g.pw("exp", x)
    y = g.pw("sin", x)
    plan = fuse(g.build(y), "none")
    assert [k.nodes for k in plan.kernels] == [("sin_1",)]


def test_check_group_reports_stored_shape_mismatch():
    graph = broadcast_producer()
    an = GraphAnalysis(graph)
    # exp_0 is also a graph output here, so it would be stored at [8, 1] in an [8, 16] kernel
    graph = type(graph)(graph.name, graph.inputs, graph.nodes, graph.outputs + ("exp_0",))
    an = GraphAnalysis(graph)
    result = check_group(an, Group("pointwise", frozenset({"exp_0", "add_2"}), an.shape("add_2")))
    assert result.reason == "exp_0 would be stored with shape [8, 1] but the kernel's domain is [8, 16]"


def test_plugin_registers_presets():
    from pipec_fusion import plugin

    registry = Registry()
    plugin.pipec_register(registry)
    assert sorted(registry.names("fusion")) == ["aggressive", "default", "none"]
    entry = registry.entry("fusion", "default")
    assert entry.distribution == "pipec-fusion"
    assert len(entry.impl.fuse(softmax(), OPTS).kernels) == 1


def test_transposed_read_of_a_producer_is_a_recompute():
    g = GraphBuilder("transpose")
    x = g.input("x", [8, 8])
    y = g.pw("exp", x)
    z = g.pw("add", y, g.permute(y, (1, 0)))
    graph = g.build(z)
    assert len(fuse(graph).kernels) == 2
    (k,) = fuse(graph, "aggressive").kernels
    assert k.inputs == ("x",) and k.outputs == ("add_2",)


def test_symbolic_reshape_into_reduction():
    g = GraphBuilder("sym", {"s0": 3})
    x = g.input("x", ["s0", 4, 8])
    flat = g.reshape(x, ["s0", 32])
    s = g.reduce("sum", flat, (1,), keepdim=True)
    y = g.pw("sub", flat, g.expand(s, ["s0", 32]))
    z = g.reshape(y, ["s0", 4, 8])
    plan = fuse(g.build(z))
    assert [k.kind for k in plan.kernels] == ["reduction", "view"]
    red, view = plan.kernels
    assert red.inputs == ("x",) and red.outputs == ("sub_3",)
    assert red.nodes == ("reshape_0", "sum_1", "expand_2", "sub_3")
    assert view.inputs == ("sub_3",) and view.outputs == ("reshape_4",)


def test_full_reduction_with_scalar_epilogue():
    g = GraphBuilder("loss")
    x = g.input("x", [8, 16])
    s = g.reduce("sum", g.pw("mul", x, x), (0, 1))
    loss = g.pw("mul", s, g.full(1 / 128, []))
    plan = fuse(g.build(loss))
    (k,) = plan.kernels
    assert k.kind == "reduction" and k.reduce_dims == (0, 1) and k.outputs == ("mul_3",)


def test_check_merge_is_usable_on_its_own():
    import networkx as nx

    from pipec_fusion import check_merge

    an = GraphAnalysis(reductions_over_different_dims())
    a = Group("reduction", frozenset({"sum_0", "sub_2"}), an.shape("x"), (1,))
    b = Group("reduction", frozenset({"sum_3"}), an.shape("x"), (0,))
    dag = nx.DiGraph([(0, 1)])
    assert check_merge(an, dag, (0, 1), a, b, "vertical") == "reduction over different dims (1,) and (0,)"
    c = Group("pointwise", frozenset({"sub_2"}), an.shape("x"))
    s = Group("reduction", frozenset({"sum_0"}), an.shape("x"), (1,))
    assert check_merge(an, dag, (0, 1), s, c, "vertical") is None


def test_reshaped_read_is_not_a_recompute():
    """A producer read once per element through a reshape fuses under default (no repeated work)."""
    g = GraphBuilder("reshaped")
    x = g.input("x", [32, 16])
    bias = g.input("bias", [4, 8, 16])
    y = g.pw("exp", x)
    z = g.pw("gelu", g.pw("add", g.reshape(y, [4, 8, 16]), bias), approximate="none")
    (k,) = fuse(g.build(z)).kernels
    assert k.inputs == ("x", "bias") and k.outputs == (z,)


def _linear_3d(then):
    """nn.Linear on a [2, 5, 16] input as captured: reshape -> mm -> add bias -> reshape, then `then`."""
    g = GraphBuilder("linear_3d")
    x = g.input("x", [2, 5, 16])
    w, bias = g.input("w", [16, 24], role="parameter"), g.input("b", [24], role="parameter")
    y = g.pw("add", g.mm(g.reshape(x, [10, 16]), w), g.expand(g.reshape(bias, [1, 24]), [10, 24]))
    return g, then(g, y)


def test_epilogue_over_a_contiguous_reshape_of_the_product_joins_it():
    g, out = _linear_3d(lambda g, y: g.pw("add", g.pw("gelu", g.reshape(y, [2, 5, 24]), approximate="tanh"), g.input("r", [2, 5, 24])))
    plan = fuse(g.build(out))
    assert [k.kind for k in plan.kernels] == ["view", "matmul"]  # the view: x as [10, 16] for the product
    (k,) = kernels_of(plan, "matmul")
    assert k.domain == (10, 24) and k.inputs == ("reshape_0", "w", "b", "r")
    assert k.nodes == ("mm_1", "reshape_2", "expand_3", "add_4", "reshape_5", "gelu_6", "add_7")
    assert k.outputs == ("add_7",) and not plan.rejected


def test_epilogue_storing_both_shapes_of_the_product():
    g, out = _linear_3d(lambda g, y: g.pw("relu", g.reshape(y, [2, 5, 24])))
    add = next(n.name for n in g.build(out).nodes if n.op == "add")
    (k,) = kernels_of(fuse(g.build(out, add)), "matmul")
    assert k.outputs == (add, out)  # [10, 24] and [2, 5, 24], both at the tile's flat index


def test_epilogue_through_a_permute_of_the_product_is_refused():
    g, out = _linear_3d(lambda g, y: g.pw("relu", g.permute(y, (1, 0))))
    plan = fuse(g.build(out))
    assert [k.kind for k in plan.kernels] == ["view", "matmul", "pointwise"]
    assert rejected_reason(plan, "mm_1", "add_4") == \
        "epilogue domain [24, 10] is not the matmul's output [10, 24] nor a contiguous reshape of it"


def test_epilogue_over_a_scrambling_reshape_is_refused():
    # [10, 24] -> [24, 10] keeps the element count but is no split or merge of dims
    g, out = _linear_3d(lambda g, y: g.pw("relu", g.reshape(y, [24, 10])))
    plan = fuse(g.build(out))
    assert [k.kind for k in plan.kernels] == ["view", "matmul", "pointwise"]
    assert rejected_reason(plan, "mm_1", "add_4") == \
        "epilogue domain [24, 10] is not the matmul's output [10, 24] nor a contiguous reshape of it"


def test_square_product_read_through_a_permute_is_refused_by_index():
    # [8, 8] permuted keeps the domain: the index check refuses it (the tile has no transposed element)
    g = GraphBuilder("mm_sq")
    x, w = g.input("x", [2, 4, 8]), g.input("w", [8, 8])
    p = g.mm(g.reshape(x, [8, 8]), w)
    y = g.pw("relu", g.reshape(g.permute(p, (1, 0)), [2, 4, 8]))
    plan = fuse(g.build(y))
    assert [k.kind for k in plan.kernels] == ["view", "matmul", "pointwise"]
    assert rejected_reason(plan, "mm_1", "relu_4").startswith("relu_4 reads matmul mm_1 at another index than its own")


@pytest.mark.parametrize("make", [layer_norm, softmax, linear_gelu], ids=lambda f: f.__name__)
def test_fusion_fuel_makes_the_first_merges_only(make):
    """fusion_fuel=N (pipec bisect) keeps the first N merges of the unrationed run, no others."""
    graph = make()
    full = fuse(graph)
    assert full.fusions, "the graph must fuse for this test to mean anything"
    for n in range(len(full.fusions) + 1):
        plan = preset("default").fuse(graph, OPTS.with_extra(fusion_fuel=n))
        # the same pairs in the same order (kernel names may differ: fewer merges, other indices)
        assert [(f.first, f.second, f.kind) for f in plan.fusions] == \
            [(f.first, f.second, f.kind) for f in full.fusions[:n]]
        assert len(plan.kernels) >= len(full.kernels)
    none = preset("default").fuse(graph, OPTS.with_extra(fusion_fuel=0))
    assert not none.fusions
    assert any("fusion_fuel=0" in r.reason for r in none.rejected)


def test_fusion_fuel_must_be_a_count():
    with pytest.raises(ValueError, match="fusion_fuel must be an integer >= 0"):
        preset("default").fuse(pointwise_chain(), OPTS.with_extra(fusion_fuel=-1))


def test_a_pair_checked_late_merges_in_the_order_of_its_real_score():
    """Legality is checked when a candidate reaches the top of the heap (engine.merge_greedily):
    a vertical pair enters with the best score its kinds could have (10 as "vertical"), turns
    out to be a "recompute" (a [4, 1] value read by every column: score 1) and goes back in,
    so the sin -> cos pair (score 5) still merges first, as checking every pair up front does."""

    class Ordered(Heuristics):
        name = "ordered"

        def score(self, first, second, kind):
            if kind == "vertical":
                return 10.0 if "exp" in first.ops else 5.0
            return 1.0 if kind == "recompute" else None

    g = GraphBuilder("late")
    x, c = g.input("x", [4, 8]), g.input("c", [4, 1])
    y = g.pw("add", x, g.expand(g.pw("exp", c), [4, 8]))
    w = g.pw("cos", g.pw("sin", x))
    plan = fusion_from_heuristics(Ordered()).fuse(g.build(y, w), OPTS)
    assert [(f.kind, f.score) for f in plan.fusions] == [("vertical", 5.0), ("vertical", 1.0)]
    assert [f.first for f in plan.fusions] == [("sin_3",), ("exp_0",)]


def test_horizontal_candidates_pair_each_group_with_its_nearest_neighbours():
    """80 independent `exp`s of one shape: with every pair offered there would be 3,160 horizontal
    candidates; each group is paired with the HORIZONTAL_WINDOW (32) nearest in graph order, so
    32 x 48 + (31 + ... + 0) = 2,032 (all refused here, each with its reason)."""
    from pipec_fusion.engine import HORIZONTAL_WINDOW

    class NoHorizontal(Heuristics):
        name = "no-horizontal"
        horizontal = True

        def score(self, first, second, kind):
            return None

    g = GraphBuilder("many")
    outs = [g.pw("exp", g.input(f"x{i}", [4, 8])) for i in range(80)]
    plan = fusion_from_heuristics(NoHorizontal()).fuse(g.build(*outs), OPTS)
    assert len(plan.kernels) == 80
    pairs = {(r.first, r.second) for r in plan.rejected}
    n, w = 80, HORIZONTAL_WINDOW
    assert len(pairs) == w * (n - w) + w * (w - 1) // 2 == 2032
    assert ("exp_0", "exp_32") in pairs and ("exp_0", "exp_33") not in pairs


def test_a_kernel_runs_where_it_computes_not_where_the_views_it_reads_are():
    """T5's position bias: a view of an input made at the top of the graph, cloned in each layer
    for a library call (the layer's matmul). Each clone kernel runs in its layer, not at the top
    (twelve 48 MiB clones held through the whole model before: a 608 MiB plan, now 86). Here each
    layer clones a view of its own input: clones of one view are one clone (common_values.py)."""
    g = GraphBuilder()
    x, w = g.input("x", (8, 8)), g.input("w", (8, 8))
    early = [g.permute(g.input(f"bias{layer}", (8, 8)), (1, 0)) for layer in range(3)]  # the views, at the top
    h = x
    clones = []
    for layer in range(3):
        h = g.pw("tanh", g.mm(h, w), name=f"h{layer}")
        clones.append(g.pw("identity", early[layer], name=f"clone{layer}"))   # made for the matmul below
        h = g.mm(h, clones[-1])
    plan = preset("default").fuse(g.build(h), CompileOptions())
    at = {n: i for i, k in enumerate(plan.kernels) for n in k.nodes if n not in early}
    for layer in range(3):
        assert at[f"h{layer}"] < at[f"clone{layer}"], [k.nodes for k in plan.kernels]
