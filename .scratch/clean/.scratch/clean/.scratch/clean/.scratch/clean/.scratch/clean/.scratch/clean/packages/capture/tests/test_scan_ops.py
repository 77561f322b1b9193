"""cumsum / cumprod / logcumsumexp lower to the `scan` op (lower_scan.py); the reference
interpreter evaluates it like eager (dtype promotion, dtype kwarg, negative dims, trivial scans)."""

import math

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import pipec_ir
from pipec_capture import core_decompositions, lower_graph
from pipec_capture.reference import IRSemanticsError, run_graph


def lower(fn, *inputs):
    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="fake")(*inputs)
    graph = lower_graph(gm, name="t")
    assert pipec_ir.loads(pipec_ir.dumps(graph)) == graph
    return graph


def check(fn, *inputs, **tol):
    graph = lower(fn, *inputs)
    (got,) = run_graph(graph, list(inputs))
    expected = fn(*inputs)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, equal_nan=True, **tol)
    return graph


def scans(graph):
    return [n for n in graph.nodes if n.op == "scan"]


g = torch.Generator().manual_seed(0)
A = torch.randn(3, 5, 7, generator=g)
INTS = torch.randint(-4, 5, (4, 6), generator=g)
MASK = torch.rand(4, 6, generator=g) > 0.5

CASES = {
    "cumsum_last": (lambda a: torch.cumsum(a, 2), A, 2, "add", "float32"),
    "cumsum_middle_negative_dim": (lambda a: torch.cumsum(a, -2), A, 1, "add", "float32"),
    "cumprod_first": (lambda a: torch.cumprod(a, 0), A, 0, "mul", "float32"),
    "logcumsumexp": (lambda a: torch.logcumsumexp(a * 20, 1), A, 1, "logaddexp", "float32"),
    "cumsum_dtype_float64": (lambda a: torch.cumsum(a, 1, dtype=torch.float64), A, 1, "add", "float64"),
    "cumsum_int_to_int64": (lambda i: torch.cumsum(i.int(), 1), INTS, 1, "add", "int64"),
    "cumprod_int": (lambda i: torch.cumprod(i, 0), INTS, 0, "mul", "int64"),
    "cumsum_bool_to_int64": (lambda m: torch.cumsum(m, 1), MASK, 1, "add", "int64"),
    "cumsum_int_dtype_int32": (lambda i: torch.cumsum(i, 1, dtype=torch.int32), INTS, 1, "add", "int32"),
    "cumsum_float_dtype_int": (lambda a: torch.cumsum(a * 3, 2, dtype=torch.int64), A, 2, "add", "int64"),
    "cumsum_half": (lambda a: torch.cumsum(a.half(), 2), A, 2, "add", "float16"),
    "method_and_epilogue": (lambda a: a.exp().cumsum(dim=2) / 2, A, 2, "add", "float32"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_to_scan_and_evaluated_like_eager(name):
    fn, x, dim, combine, dtype = CASES[name]
    graph = check(fn, x, **({"rtol": 2e-3, "atol": 2e-3} if dtype == "float16" else {}))
    (node,) = scans(graph)
    assert node.attr("dim") == dim and node.attr("combine") == combine and node.type.dtype == dtype
    assert graph.types()[node.inputs[0]].dtype == dtype  # capture casts first
    assert not [n for n in graph.nodes if n.op == "extern"]


@pytest.mark.parametrize("fn", [
    lambda a: torch.cumsum(a.sum(), 0),  # 0-d
    lambda a: torch.cumprod(a.sum(), -1),
    lambda a: torch.cumsum(a[:, :1], 1),  # size-1 scan dim
    lambda a: torch.logcumsumexp(a[:, 2:3], -1),
    lambda a: torch.cumsum(a[:, :1], 1, dtype=torch.float64),
    lambda a: torch.cumsum(a[:, :0], 0),  # empty
    lambda a: torch.cumprod(a[:0], 1),
])
def test_trivial_scans_are_no_scans(fn):
    graph = check(fn, A[0])
    assert not scans(graph) and not [n for n in graph.nodes if n.op == "extern"]


def test_logcumsumexp_infinities_and_nan():
    x = torch.randn(4, 6, generator=g) * 50
    x[0] = -math.inf
    x[1, 2] = math.inf
    x[2, 3] = math.nan
    check(lambda a: torch.logcumsumexp(a, 1), x)


def test_unsupported_dtypes_stay_extern():
    graph = lower(lambda i: torch.logcumsumexp(i.float(), 1) + torch.cumsum(i, 0).float(), INTS)
    assert len(scans(graph)) == 2
    bf = lower(lambda m: torch.cumsum(m, 1, dtype=torch.bool).int(), MASK)  # eager has no kernel for it
    (ext,) = [n for n in bf.nodes if n.op == "extern"]
    assert ext.attr("target") == "aten.cumsum.default" and "bool scan result" in ext.attr("reason")


def test_reference_checks_the_scan_rules():
    t = pipec_ir.TensorType((4, 6), "float32")
    graph = pipec_ir.Graph("bad", (pipec_ir.GraphInput("x", pipec_ir.TensorType((4, 6), "float64")),),
                           (pipec_ir.Node("s", "scan", ("x",), t, pipec_ir.make_attrs(dim=1, combine="add")),),
                           ("s",))
    with pytest.raises(IRSemanticsError, match="capture casts first"):
        run_graph(graph, [torch.zeros(4, 6, dtype=torch.float64)])
    graph = pipec_ir.Graph("bad", (pipec_ir.GraphInput("x", t),),
                           (pipec_ir.Node("s", "scan", ("x",), t, pipec_ir.make_attrs(dim=1, combine="max")),),
                           ("s",))
    with pytest.raises(IRSemanticsError, match="unknown scan combine 'max'"):
        run_graph(graph, [torch.zeros(4, 6)])
