"""Op-by-op: trace small functions to ATen with make_fx, lower, and evaluate the IR."""


import pytest
import sympy
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import pipec_ir
from pipec_capture import CaptureError, core_decompositions, lower_graph
from pipec_capture.reference import IRSemanticsError, run_graph


def trace(fn, *inputs):
    return make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="fake")(*inputs)


def lower(fn, *inputs, **kw):
    gm = trace(fn, *inputs)
    graph = lower_graph(gm, name="t", **kw)
    assert pipec_ir.loads(pipec_ir.dumps(graph)) == graph
    return graph, gm


def check(fn, *inputs, **tol):
    graph, gm = lower(fn, *inputs)
    expected = fn(*inputs)
    if not isinstance(expected, (tuple, list)):
        expected = (expected,)
    got = run_graph(graph, list(inputs))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, equal_nan=True, **tol)
    return graph


def ops(graph):
    return [n.op for n in graph.nodes]


g = torch.Generator().manual_seed(0)
A = torch.randn(4, 8, generator=g)
B = torch.randn(8, generator=g)
C = torch.randn(4, 1, generator=g)
P = torch.rand(4, 8, generator=g) + 0.1
I = torch.randint(-5, 5, (4, 8), generator=g)
BOOL = torch.rand(4, 8, generator=g) > 0.5

CASES = {
    "add_broadcast": (lambda a, b: a + b, A, B),
    "add_alpha": (lambda a, c: torch.add(a, c, alpha=2.5), A, C),
    "sub_alpha_scalar": (lambda a: torch.sub(a, 3, alpha=2), A),
    "rsub": (lambda a: 1 - a, A),
    "mul_scalar": (lambda a: a * 3, A),
    "div": (lambda a, c: a / c, A, C),
    "div_int_int": (lambda i: i / 3, I),
    "int_plus_float": (lambda i: i + 0.5, I),
    "int_times_float_tensor": (lambda i, b: i * b, I, B),
    "unary_math": (lambda p: (p.exp() + p.log() + p.sqrt() + p.rsqrt() + p.reciprocal() + p.sin()
                              + p.cos() + p.tanh() + p.sigmoid() + p.erf() - p.neg().abs()), P),
    "activations": (lambda a: F.relu(a) + F.gelu(a) + F.gelu(a, approximate="tanh") + F.silu(a), A),
    "pow": (lambda p, b: p ** 2 + p ** 3.5 + torch.pow(p, b.abs()) + p ** 0.5, P, B),
    "max_min": (lambda a, b: torch.maximum(a, b) - torch.minimum(a, b), A, B),
    "clamp": (lambda a: a.clamp(-0.5, 0.5) + a.clamp(min=0.1) + a.clamp(max=0.2), A),
    "where": (lambda a, b: torch.where(a > b, a, b * 2), A, B),
    "where_scalar": (lambda a: torch.where(a > 0, a, 0.0), A),
    "compare": (lambda a, i: ((a > 0) & (i <= 2)) | (a == i) | (a != 1.5) | ~(a < 0.3) | (i >= a), A, I),
    "logical": (lambda x, y: torch.logical_and(x, y) | torch.logical_not(x) ^ torch.logical_or(x, y), BOOL, BOOL.t().reshape(4, 8)),
    "isnan": (lambda a: torch.isnan(a / a), torch.tensor([[0.0, 1.0], [2.0, 0.0]])),
    "casts": (lambda a: a.to(torch.float16).to(torch.float32) + a.to(torch.int32), A),
    "views": (lambda a: a.view(2, 2, 8).permute(2, 0, 1).reshape(8, 4).t().unsqueeze(0).squeeze(0)
              .transpose(0, 1).contiguous() * 2, A),
    "expand": (lambda c: c.expand(4, 8) + 1, C),
    "slice_select": (lambda a: a[1:3, ::2] * 2 + a[-1, 2:6].sum(), A),
    "slice_clamped": (lambda a: a[:, 2:100] + 0, A),
    "split": (lambda a: torch.split(a, 3, dim=1)[1] + a.chunk(2, dim=0)[1][:, :2].sum(), A),
    "unbind": (lambda a: sum(a.unbind(0)), A),
    "sum": (lambda a: (a.sum(), a.sum(1), a.sum((0, 1), keepdim=True), a.sum(-1, keepdim=True)), A),
    "sum_int": (lambda i, b: (i.sum(1), b.sum()), I, BOOL),
    "mean": (lambda a: (a.mean(), a.mean(1), a.mean(0, keepdim=True)), A),
    "amax_amin": (lambda a: (a.amax(1), a.amin(0, keepdim=True), a.max(), a.min()), A),
    "max_dim": (lambda a: tuple(a.max(1)) + tuple(a.min(0, keepdim=True)), A),
    "argmax": (lambda a: (a.argmax(1), a.argmin(0, keepdim=True), a.argmax()), A),
    "prod": (lambda p: (p.prod(1), p.prod()), P),
    "any_all": (lambda a: ((a > 1).any(1), (a > -3).all(), (a > 0).any()), A),
    "var": (lambda a: (a.var(1), a.var(0, unbiased=False, keepdim=True), a.std(1)), A),
    "var_mean": (lambda a: torch.var_mean(a, 1, correction=0), A),
    "softmax": (lambda a: (a.softmax(-1), a.log_softmax(0)), A),
    "softmax_half": (lambda a: torch.softmax(a.half(), -1, dtype=torch.float32), A),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (8,), w, b), A, B, B * 0.5),
    "layer_norm_noaffine": (lambda a: F.layer_norm(a.view(2, 2, 8), (2, 8)), A),
    "linear": (lambda a, w, b: F.linear(a, w, b), A, torch.randn(5, 8, generator=g), torch.randn(5, generator=g)),
    "addmm_beta": (lambda c, a, w: torch.addmm(c, a, w, beta=0.5, alpha=2.0), C, A, torch.randn(8, 3, generator=g)),
    "bmm_matmul": (lambda a: a.view(2, 2, 8) @ a.view(2, 8, 2), A),
    "creation": (lambda a: a + torch.arange(8) + torch.full((4, 8), 2.0) + torch.zeros_like(a)
                 + torch.ones_like(a) * torch.arange(1, 9, 2).repeat(2), A),
    "arange_float": (lambda a: a * torch.arange(0.0, 4.0, 0.5), A),
    "scalar_tensor_math": (lambda a: a * torch.tensor(2.0), A),
    "hardtanh": (lambda a: F.hardtanh(a) + F.relu6(a), A),
    "floor_div": (lambda a, i: (torch.div(a, 0.3, rounding_mode="floor"), i // 3,
                                torch.div(a, 0.7, rounding_mode="trunc")), A, I),
    # JetMoE's router: token index // top_k; negative ints truncate toward zero, unlike floor
    "int_div_modes": (lambda i, j: (torch.div(i, j, rounding_mode="trunc"), torch.div(i, -3, rounding_mode="trunc"),
                                    torch.div(i, j, rounding_mode="floor")),
                      I, torch.tensor([3, -2, 4, -5, 1, 2, -1, 7])),
    "clone_detach": (lambda a: a.clone().detach() + 1, A),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowering_matches_eager(name):
    fn, *inputs = CASES[name]
    graph = check(fn, *inputs)
    assert not any(n.op == "extern" for n in graph.nodes), pipec_ir.format_document(graph)


def test_half_precision_layer_norm_computes_in_float32():
    x = A.half()
    graph = check(lambda a: F.layer_norm(a, (8,)), x)
    sums = [n for n in graph.nodes if n.op == "sum"]
    assert sums and all(n.type.dtype == "float32" for n in sums)


def test_gelu_kept_and_softmax_decomposed():
    graph, _ = lower(lambda a: F.gelu(a).softmax(-1), A)
    assert ops(graph).count("gelu") == 1
    assert [o for o in ops(graph) if o in ("max", "sub", "exp", "sum", "div")] == ["max", "sub", "exp", "sum", "div"]


def test_no_prims_and_no_implicit_broadcast():
    graph, gm = lower(lambda a, b, c: (a + b) * c - b.sum(), A, B, C)
    assert not any(str(n.target).startswith("prims.") for n in gm.graph.nodes)
    types = graph.types()
    for n in graph.nodes:
        if pipec_ir.kind_of(n.op) == "pointwise":
            assert all(types[i].shape == n.type.shape for i in n.inputs)


def test_unknown_op_becomes_extern():
    rows = torch.tensor([True, False, True, False])  # a mask index: index_put stays extern
    graph = check(lambda a, r, v: a.index_put((r,), v).median(), A, rows, A[0] * 2)
    externs = [n for n in graph.nodes if n.op == "extern"]
    targets = {n.attr("target") for n in externs}
    assert {"aten.index_put.default", "aten.median.default"} <= targets
    put = next(n for n in externs if n.attr("target") == "aten.index_put.default")
    assert put.attr("reason") == "no lowering for aten.index_put.default: boolean mask index (data-dependent shape)"
    assert isinstance(put.attr("args")[1][0], pipec_ir.Ref)
    assert set(put.inputs) >= {r.name for r in put.attr("args")[1]}


def test_library_extern_and_dtype_leaves():
    x = torch.randn(1, 2, 6, 6, generator=g)
    w = torch.randn(3, 2, 3, 3, generator=g)
    graph = check(lambda x, w: F.conv2d(x, w, padding=1).relu() + torch.randn_like(x).sum() * 0, x, w)
    conv = next(n for n in graph.nodes if n.op == "extern" and "convolution" in n.attr("target"))
    assert conv.attr("reason") == "library"
    graph, _ = lower(lambda a: a.sum() + torch.tril_indices(3, 3, dtype=torch.int32).sum(), A)
    ext = next(n for n in graph.nodes if n.op == "extern")
    assert pipec_ir.Dtype("int32") in [v for _, v in ext.attr("kwargs")] + list(ext.attr("args"))


def test_multi_result_extern_getitem():
    # a sort whose rows are too long for pipec's rank sort stays one extern with two results
    graph = check(lambda a: torch.sort(a.repeat(1, 130), dim=1)[0] + torch.sort(a.repeat(1, 130), dim=1)[1], A)
    multi = [n for n in graph.nodes if pipec_ir.is_multi_result(n)]
    assert multi and multi[0].type.shape == () and multi[0].type.dtype == "tuple"
    results = multi[0].attr("results")
    assert results[0] == (("4", "1040"), "float32") and results[1] == (("4", "1040"), "int64")
    picks = [n for n in graph.nodes if n.op == "getitem"]
    assert {n.attr("index") for n in picks} == {0, 1}


def test_fullgraph_raises_for_unlowered_op():
    gm = trace(lambda a: torch.median(a), A)
    with pytest.raises(CaptureError, match=r"aten\.median\.default has no pipec lowering \(fullgraph=True\)"):
        lower_graph(gm, fullgraph=True)
    # library ops are fine under fullgraph
    lower_graph(trace(lambda a, b: a @ b, A, A.t()), fullgraph=True)


def test_non_tensor_output_extern_raises():
    # build the graph by hand: item() is a data-dependent scalar
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty((), device="meta")
    s = graph.call_function(torch.ops.aten._local_scalar_dense.default, (x,))
    s.meta["val"] = 1.0
    graph.output((s,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(CaptureError, match=r"_local_scalar_dense.*does not return tensors"):
        lower_graph(gm)


def test_reference_rejects_implicit_broadcast():
    from pipec_ir import Graph, GraphInput, Node, TensorType
    import sympy
    t = lambda *s: TensorType(tuple(sympy.Integer(v) for v in s), "float32")
    bad = Graph("bad", (GraphInput("a", t(4, 8)), GraphInput("b", t(8))),
                (Node("c", "add", ("a", "b"), t(4, 8)),), ("c",))
    with pytest.raises(IRSemanticsError, match="implicit broadcasting"):
        run_graph(bad, [A, B])


def test_fx_names_are_kept():
    graph, gm = lower(lambda a: (a + 1).exp(), A)
    fx_names = {n.name for n in gm.graph.nodes if n.op == "call_function"}
    assert fx_names <= {n.name for n in graph.nodes}
    assert len({n.name for n in graph.nodes}) == len(graph.nodes)


def test_symbolic_shapes():
    gm = make_fx(lambda a: (a * 2).sum(1).softmax(0), decomposition_table=core_decompositions(),
                 tracing_mode="symbolic")(A)
    graph = lower_graph(gm, name="sym")
    assert graph.symbols, "expected size symbols"
    assert pipec_ir.loads(pipec_ir.dumps(graph)) == graph
    for x in (A, torch.randn(6, 5, generator=g)):
        torch.testing.assert_close(run_graph(graph, [x])[0], (x * 2).sum(1).softmax(0))


def test_symbolic_counts_lower_to_size_fulls():
    """mean/var/layer_norm over a symbolic dim divide by a `full` whose value is a Size."""
    def f(a):
        return a.mean(1), a.var(0), F.layer_norm(a, (a.shape[1],)), a[:, -2:] * 2, a[:, -1]
    gm = make_fx(f, decomposition_table=core_decompositions(), tracing_mode="symbolic")(A)
    graph = lower_graph(gm)
    assert pipec_ir.loads(pipec_ir.dumps(graph)) == graph
    assert "extern" not in ops(graph)
    counts = {n.attr("value").expr for n in graph.nodes
              if n.op == "full" and isinstance(n.attr("value"), pipec_ir.Size)}
    assert counts and all(c.startswith("s") or "s" in c for c in counts)
    starts = [n.attr("start") for n in graph.nodes if n.op == "slice"]
    assert any(isinstance(s, pipec_ir.Size) for s in starts)
    for x in (A, torch.randn(3, 7, generator=g), torch.randn(5, 2, generator=g)):
        for got, want in zip(run_graph(graph, [x]), f(x)):
            torch.testing.assert_close(got, want, equal_nan=True)


def test_storage_offset_of_a_view_is_a_size():
    """`aten.sym_storage_offset` (torch 2.11 reads a view's offset off the traced tensor, as
    sym_size and sym_stride read sizes) lowers to a size expression, not an op."""
    def f(a):
        tail = a[:, -2:]  # its offset, Max(s1 - 2, 0), is symbolic
        return tail * tail.storage_offset()
    gm = make_fx(f, decomposition_table=core_decompositions(), tracing_mode="symbolic")(A)
    assert any(n.target is torch.ops.aten.sym_storage_offset.default for n in gm.graph.nodes)
    graph = lower_graph(gm)
    assert "extern" not in ops(graph)
    for x in (A, torch.randn(3, 7, generator=g)):
        torch.testing.assert_close(run_graph(graph, [x])[0], f(x))


def test_symbolic_extern_arguments_are_size_leaves():
    def f(a):
        return torch.topk(a, a.shape[0], dim=1).values * 2  # topk is an extern: here with a SymInt k
    gm = make_fx(f, decomposition_table=core_decompositions(), tracing_mode="symbolic")(A)
    graph = lower_graph(gm)
    [ext] = [n for n in graph.nodes if n.op == "extern"]
    assert ext.attr("args")[1] == pipec_ir.Size("s0")
    assert pipec_ir.loads(pipec_ir.dumps(graph)) == graph
    for x in (A, torch.randn(3, 5, generator=g)):
        torch.testing.assert_close(run_graph(graph, [x])[0], f(x))


def test_a_data_dependent_size_error_names_its_node():
    """A size with no example value (nonzero's count) is reported with the op and node that
    made it, not only the symbol's name."""
    gm = make_fx(lambda x: x.nonzero() + 1, decomposition_table=core_decompositions(),
                 tracing_mode="symbolic")(torch.randn(4, 3))
    with pytest.raises(CaptureError, match=r"op aten\.nonzero\.default \(node nonzero\): size u0 has no example"):
        lower_graph(gm, name="t")


def _graph_taking_a_size_check(defined: bool):
    """x * 2 in a graph that also takes `u0 >= 0` (a SymBool) and asserts it, as torch 2.11's
    backward graphs take the forward's checks of an unbacked slice length; with `defined`, u0
    was defined by another graph of the same shape env (SymbolTable.define)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from pipec_capture.symbols import SymbolTable

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    u0 = env.create_unbacked_symint()
    if defined:
        SymbolTable().define(u0.node.expr, sympy.Integer(3), env)
    g = torch.fx.Graph()
    x, check = g.placeholder("x"), g.placeholder("check")
    x.meta["val"], check.meta["val"] = mode.from_tensor(torch.randn(4)), u0 >= 0
    g.call_function(torch.ops.aten._assert_scalar.default, (check, "u0 >= 0")).meta["val"] = None
    y = g.call_function(torch.ops.aten.mul.Tensor, (x, 2))
    with mode:
        y.meta["val"] = x.meta["val"] * 2
    g.output((y,))
    return torch.fx.GraphModule({}, g)


def test_a_check_of_a_defined_size_taken_as_input_lowers_to_nothing():
    graph = lower_graph(_graph_taking_a_size_check(defined=True), name="t")
    assert [i.name for i in graph.inputs] == ["x"] and "mul" in ops(graph)
    with pytest.raises(CaptureError, match="node check.*input of type SymBool is not supported"):
        lower_graph(_graph_taking_a_size_check(defined=False), name="t")


def test_every_ir_reduction_has_a_reference_row():
    """The reference interpreter's reductions and scans are tables keyed like pipec_ir.ops's rows."""
    from pipec_capture.reference import TORCH_REDUCTIONS, TORCH_SCANS
    from pipec_ir.ops import REDUCTION_OPS, SCAN_COMBINES

    assert set(TORCH_REDUCTIONS) == REDUCTION_OPS
    assert set(TORCH_SCANS) == set(SCAN_COMBINES)


def test_true_divide_lowers_as_div_with_integer_operands_promoted():
    """torch's nearest-upsample decomposition at symbolic sizes leaves aten.true_divide in the
    graph (diffusers' UNets under dynamic shapes). Tracing would turn it into div, so the fx graph
    is built by hand."""
    ints = torch.arange(1, 9, dtype=torch.int64).reshape(2, 4)
    for op, args in ((torch.ops.aten.true_divide.Tensor, (ints, ints.flip(1))),
                     (torch.ops.aten.true_divide.Scalar, (A, 3))):
        fx = torch.fx.Graph()
        tensors = [fx.placeholder(f"x{i}") for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        fx.output(fx.call_function(op, (*tensors, *args[len(tensors):])))
        example = [a for a in args if isinstance(a, torch.Tensor)]
        graph = lower_graph(torch.fx.GraphModule(torch.nn.Module(), fx), example, name="t")
        assert "extern" not in ops(graph) and "div" in ops(graph)
        torch.testing.assert_close(run_graph(graph, example)[0], op(*args))


def test_arange_from_a_size_expression():
    """`arange` starting at a size (Autoformer's lags from a symbolic length): an iota from 0 plus
    the start the runtime evaluates, not an extern; integer and float, with a step."""
    def f(a):
        n = a.shape[0]
        return torch.arange(n, n + 5) * 2, torch.arange(n - 1, 2 * n + 3, 2, dtype=torch.float32)
    gm = make_fx(f, decomposition_table=core_decompositions(), tracing_mode="symbolic")(A)
    graph = lower_graph(gm)
    assert "extern" not in ops(graph) and graph.symbols
    for x in (A, torch.randn(3, 7, generator=g), torch.randn(6, 2, generator=g)):
        for got, want in zip(run_graph(graph, [x]), f(x)):
            torch.testing.assert_close(got, want)
