"""The examples/ models through Dynamo + AOTAutograd and through torch.export."""

import pytest
import torch

import pipec_ir
from pipec_capture import lower_graph
from pipec_capture.export import export_graph
from pipec_capture.plugin import DynamoCapture, pipec_register
from pipec_capture.reference import run_graph

from conftest import dynamo_capture, load_example

EXAMPLES = ["mlp_gelu", "norm_softmax", "gpt2_block"]


def op_set(graph):
    return {n.op for n in graph.nodes}


def check_graph(graph):
    pipec_ir.verify(graph)
    assert pipec_ir.loads(pipec_ir.dumps(graph)) == graph
    assert pipec_ir.digest(pipec_ir.loads(pipec_ir.dumps(graph))) == pipec_ir.digest(graph)
    for n in graph.nodes:
        if n.op == "extern":
            assert not n.attr("target").startswith("prims.")


@pytest.mark.parametrize("name", EXAMPLES)
def test_dynamo_inference(name):
    ex = load_example(name)
    out, records = dynamo_capture(ex.model, ex.example_inputs())
    torch.testing.assert_close(out, ex.model(*ex.example_inputs()))
    assert [k for _, _, k in records] == ["inference"]
    graph, gm, _ = records[0]
    check_graph(graph)
    assert not any(str(n.target).startswith("prims.") for n in gm.graph.nodes)
    ops = op_set(graph)
    if name == "mlp_gelu":
        gelus = [n for n in graph.nodes if n.op == "gelu"]
        assert sorted(n.attr("approximate") for n in gelus) == ["none", "tanh"]
        assert "mm" in ops and "extern" not in ops
    if name == "norm_softmax":
        assert {"max", "sub", "exp", "sum", "div", "rsqrt"} <= ops and "extern" not in ops
    if name == "gpt2_block":
        attn = [n for n in graph.nodes if n.op == "extern"]
        assert attn and all(n.attr("reason") == "library" for n in attn)
        assert "attention" in attn[0].attr("target")
        assert {"gelu", "mm", "rsqrt"} <= ops


def test_gpt2_attention_decomposed():
    ex = load_example("gpt2_block")
    out, records = dynamo_capture(ex.model, ex.example_inputs(), decompose_attention=True)
    torch.testing.assert_close(out, ex.model(*ex.example_inputs()))
    graph = records[0][0]
    assert "extern" not in op_set(graph) and "bmm" in op_set(graph)


def test_dynamo_training_forward_backward():
    ex = load_example("mlp_gelu")
    x = ex.example_inputs()[0].requires_grad_(True)
    out, records = dynamo_capture(ex.model, (x,), grad=True)
    out.sum().backward()
    kinds = [k for _, _, k in records]
    assert kinds == ["forward", "backward"]
    for graph, _, _ in records:
        check_graph(graph)
    assert x.grad is not None


@pytest.mark.parametrize("name", EXAMPLES)
def test_export_with_bindings(name):
    ex = load_example(name)
    graph, bindings = export_graph(ex.model, ex.example_inputs())
    check_graph(graph)
    params = {n for n, _ in ex.model.named_parameters()}
    assert {i.name for i in graph.inputs if i.role == "parameter"} == params
    assert set(bindings) == params
    user = iter(ex.example_inputs())
    args = [bindings[i.name] if i.role != "input" else next(user) for i in graph.inputs]
    got = run_graph(graph, args)
    torch.testing.assert_close(got[0], ex.model(*ex.example_inputs()))


def test_export_of_a_dtype_cast():
    """torch.export checks a tensor's dtype before `.to(dtype)` with aten._assert_tensor_metadata, an op
    with no result (so no meta["val"]): it lowers to nothing (was "the fx graph has no meta['val']")."""
    class Cast(torch.nn.Module):
        def forward(self, ids, x):
            return x * ids.to(torch.float32)

    ids, x = torch.arange(6).reshape(2, 3), torch.randn(2, 3)
    graph, bindings = export_graph(Cast(), [ids, x])
    check_graph(graph)
    assert bindings == {} and "extern" not in op_set(graph) and "cast" in op_set(graph)
    torch.testing.assert_close(run_graph(graph, [ids, x])[0], x * ids.to(torch.float32))


def test_plugin_registers_both_captures():
    reg = pipec_ir.Registry()
    pipec_register(reg)
    assert set(reg.names("capture")) == {"dynamo", "export"}
    assert isinstance(reg.get("capture", "dynamo"), DynamoCapture)
    ex = load_example("norm_softmax")
    graph = reg.get("capture", "export").capture(ex.model, ex.example_inputs(), pipec_ir.CompileOptions())
    check_graph(graph)
    g2, bindings = reg.get("capture", "export").export_with_bindings(
        ex.model, ex.example_inputs(), pipec_ir.CompileOptions())
    assert g2 == graph and set(bindings) == {"norm.weight", "norm.bias"}


def test_dynamo_capture_object_and_backend():
    cap = DynamoCapture()
    seen = []

    def compile_aten_graph(gm, example_inputs, kind):
        graph = cap.capture(gm, example_inputs, pipec_ir.CompileOptions())
        seen.append(graph)
        return lambda args: run_graph(graph, args)

    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.nn.functional.silu(x) * 2, backend=cap.dynamo_backend(compile_aten_graph))
    x = torch.randn(16)
    torch.testing.assert_close(fn(x), torch.nn.functional.silu(x) * 2)
    assert "silu" in op_set(seen[0])


def test_fullgraph_error_through_dynamo():
    options = pipec_ir.CompileOptions(fullgraph=True)
    cap = DynamoCapture()

    def compile_aten_graph(gm, example_inputs, kind):
        cap.capture(gm, example_inputs, options)
        return lambda args: gm(*args)

    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.median(x), backend=cap.dynamo_backend(compile_aten_graph))
    with pytest.raises(Exception, match="median.default has no pipec lowering"):
        fn(torch.randn(8))


def test_dynamo_dynamic_shapes():
    records = []

    def compile_aten_graph(gm, example_inputs, kind):
        graph = lower_graph(gm, example_inputs, name=kind)
        records.append(graph)

        def run(args):
            tensors = [a for a in args if isinstance(a, torch.Tensor)]  # SymInt args are not graph inputs
            return run_graph(graph, tensors)
        return run

    from pipec_capture import make_dynamo_backend
    torch._dynamo.reset()
    fn = lambda x, w: torch.softmax(x @ w, -1) + x.sum(0)  # noqa: E731
    f = torch.compile(fn, backend=make_dynamo_backend(compile_aten_graph), dynamic=True)
    w = torch.randn(8, 8)
    with torch.no_grad():
        for n in (4, 6, 9):
            x = torch.randn(n, 8)
            torch.testing.assert_close(f(x, w), fn(x, w))
    graph = records[-1]
    assert graph.symbols and all(s.name.startswith("s") for s in graph.symbols)
    assert pipec_ir.loads(pipec_ir.dumps(graph)) == graph


class _Composites(torch.nn.Module):
    """Composite (CompositeImplicitAutograd) ops that Dynamo decomposes as it traces and
    torch.export keeps unless its table says otherwise."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x, y):
        h = self.conv(x).flatten(2)[..., :8]  # [2, 4, 8]
        h = torch.nn.functional.gelu(self.fc(h))  # linear on a 3-D input
        h = torch.matmul(h, y).square()
        return torch.where(h > 1, 1.0, h).type_as(y)


def _ops(graph):
    return sorted((n.op, n.attr("target") if n.op == "extern" else "") for n in graph.nodes)


@pytest.mark.parametrize("name", EXAMPLES + ["composites", "frozen"])
def test_export_lowers_like_dynamo(name):
    """The export capture's Graph holds the ops of the Dynamo capture's (`aten.linear` as
    view + addmm + view, `conv2d` as `convolution`, ...), so both fuse alike; the attention
    library call stays the portable op in an export."""
    if name in ("composites", "frozen"):  # frozen: no weight requires grad (matmul folds otherwise)
        torch.manual_seed(0)
        model = _Composites().eval().requires_grad_(name == "composites")
        inputs = (torch.randn(2, 3, 4, 4), torch.randn(5, 6))
    else:
        ex = load_example(name)
        model, inputs = ex.model, ex.example_inputs()
    _, records = dynamo_capture(model, inputs, check=False)
    exported, bindings = export_graph(model, inputs, pipec_ir.CompileOptions().with_extra(export_strict=False))
    user = iter(inputs)
    got = run_graph(exported, [bindings[i.name] if i.role != "input" else next(user) for i in exported.inputs])
    with torch.no_grad():
        torch.testing.assert_close(got[0], model(*inputs))
    portable = {"aten._scaled_dot_product_flash_attention_for_cpu.default": "aten.scaled_dot_product_attention.default"}
    dynamo_ops = sorted((op, portable.get(t, t)) for op, t in _ops(records[0][0]) if op != "getitem")
    assert [o for o in _ops(exported) if o[0] != "getitem"] == dynamo_ops
    assert not any(t.startswith(("aten.linear", "aten.conv2d", "aten.matmul")) for _, t in _ops(exported))
