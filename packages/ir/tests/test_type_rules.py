"""Type rules (pipec_ir.ops.OPS / pipec_ir.type_rules): a node's declared type must be what its op gives."""

import json

import pytest
import sympy
from pipec_ir import (
    OPS, AttributeTypeError, Graph, GraphInput, IRError, Node, Ref, Size, SymbolRange, TensorType,
    TypeMismatchError, VerifyError, dumps, loads, make_attrs, verify,
)
from pipec_ir.symbolic import FloorDiv, size_symbol

S0, S1 = size_symbol("s0"), size_symbol("s1")


def T(dtype, *shape):
    return TensorType(tuple(sympy.sympify(s) for s in shape), dtype)


def graph(inputs, nodes, outputs=None, symbols=()):
    ins = tuple(GraphInput(n, t) for n, t in inputs.items())
    nodes = tuple(Node(name, op, tuple(i), t, make_attrs(**attrs)) for name, op, i, t, attrs in nodes)
    return Graph("g", ins, nodes, tuple(outputs or (nodes[-1].name,)), tuple(symbols))


def n(name, op, inputs, t, **attrs):
    return (name, op, inputs, t, attrs)


X = {"x": T("float32", 3, 4)}


def test_every_op_has_a_type_rule():
    assert all(d.rule is not None for d in OPS.values()), [op for op, d in OPS.items() if d.rule is None]


def test_reductions_are_rows_of_the_op_table():
    """A reduction's meaning is its row (identity, result dtype, indexed), and only reductions have one."""
    from pipec_ir.ops import IDENTITIES, REDUCTION, REDUCTION_OPS, kind_of

    assert REDUCTION_OPS == {op for op, d in OPS.items() if d.reduction is not None}
    assert all(kind_of(op) == REDUCTION and OPS[op].reduction.identity in IDENTITIES for op in REDUCTION_OPS)
    assert {op for op in REDUCTION_OPS if OPS[op].reduction.indexed} == {"argmax", "argmin"}


# ---------------------------------------------------------------- documents that are right verify


GOOD = {
    "pointwise": (X, [n("a", "relu", ["x"], T("float32", 3, 4)), n("b", "add", ["a", "x"], T("float32", 3, 4))]),
    "compare+where": ({"x": T("float32", 3, 4), "y": T("float32", 3, 4)}, [
        n("c", "lt", ["x", "y"], T("bool", 3, 4)),
        n("d", "logical_not", ["c"], T("bool", 3, 4)),
        n("w", "where", ["d", "x", "y"], T("float32", 3, 4))]),
    "cast": (X, [n("c", "cast", ["x"], T("bfloat16", 3, 4))]),
    "isnan": (X, [n("c", "isnan", ["x"], T("bool", 3, 4))]),
    "gelu": (X, [n("g", "gelu", ["x"], T("float32", 3, 4), approximate="tanh")]),
    "sum keepdim": (X, [n("s", "sum", ["x"], T("float32", 3, 1), dims=(1,), keepdim=True)]),
    "sum all": (X, [n("s", "sum", ["x"], T("float32"), dims=(0, 1), keepdim=False)]),
    "argmax": (X, [n("s", "argmax", ["x"], T("int64", 4), dims=(0,), keepdim=False)]),
    "any": ({"x": T("int32", 3, 4)}, [n("s", "any", ["x"], T("bool", 3), dims=(1,), keepdim=False)]),
    "scan": (X, [n("c", "scan", ["x"], T("float32", 3, 4), dim=1, combine="logaddexp")]),
    "views": (X, [n("r", "reshape", ["x"], T("float32", 2, 6)),
                  n("p", "permute", ["r"], T("float32", 6, 2), dims=(1, 0)),
                  n("s", "slice", ["p"], T("float32", 2, 2), dim=0, start=1, step=3),
                  n("e", "select", ["s"], T("float32", 2), dim=0, index=1),
                  n("u", "reshape", ["e"], T("float32", 1, 2)),
                  n("b", "expand", ["u"], T("float32", 5, 2))]),
    "take": ({"x": T("float32", 3, 4), "i": T("int64", 7)}, [n("t", "take", ["x", "i"], T("float32", 7))]),
    "scatter": ({"x": T("float32", 3, 4), "i": T("int64", 5), "v": T("float32", 5)},
                [n("t", "scatter", ["x", "i", "v"], T("float32", 3, 4), reduce="sum")]),
    "creation": ({}, [n("f", "full", [], T("float16", 2, 2), value=1.5),
                      n("i", "iota", [], T("int64", 2, 3), dim=1, start=0, step=2)]),
    "mm": ({"a": T("float32", 3, 4), "b": T("float32", 4, 5)}, [n("m", "mm", ["a", "b"], T("float32", 3, 5))]),
    "bmm": ({"a": T("float16", 2, 3, 4), "b": T("float16", 2, 4, 5)},
            [n("m", "bmm", ["a", "b"], T("float16", 2, 3, 5))]),
    "rand": ({"s": T("int64", 3), "p": T("int64", 3)},
             [n("r", "rand", ["s", "p"], T("float32", 3), distribution="normal", offset=0)]),
    "collectives": (X, [n("r", "all_reduce", ["x"], T("float32", 3, 4), reduce_op="sum", group="0"),
                        n("g", "all_gather_into_tensor", ["x"], T("float32", 6, 4), group_size=2, group="0"),
                        n("gw", "wait_tensor", ["g"], T("float32", 6, 4)),
                        n("s", "reduce_scatter_tensor", ["gw"], T("float32", 3, 4), reduce_op="avg", group_size=2,
                          group="0"),
                        n("a", "all_to_all_single", ["x"], T("float32", 5, 4), output_split_sizes=(2, 3),
                          input_split_sizes=(1, 2), group="0"),
                        n("e", "all_to_all_single", ["x"], T("float32", 3, 4), output_split_sizes=None,
                          input_split_sizes=None, group="0"),
                        n("w", "wait_tensor", ["s"], T("float32", 3, 4))]),
    "extern": (X, [n("e", "extern", ["x"], T("float32", 9, 9), target="aten.foo.default", args=(Ref("x"),),
                     kwargs=(), reason="no lowering")]),
    "multi-result extern": (X, [
        n("e", "extern", ["x"], T("tuple"), target="aten.sort.default", args=(Ref("x"),), kwargs=(),
          reason="no lowering", results=((("3", "4"), "float32"), (("3", "4"), "int64"), None)),
        n("v", "getitem", ["e"], T("float32", 3, 4), index=0),
        n("i", "getitem", ["e"], T("int64", 3, 4), index=1)]),
}


@pytest.mark.parametrize("case", GOOD)
def test_well_typed_documents_verify_and_load(case):
    inputs, nodes = GOOD[case]
    g = graph(inputs, nodes)
    assert verify(g) is g
    assert loads(dumps(g)) == g


# ---------------------------------------------------------------- documents that contradict themselves


BAD = {
    # the cases: a declared output, dtype or input shape that disagrees with the ops
    "output shape": (X, [n("s", "sum", ["x"], T("float32", 3, 3), dims=(1,), keepdim=False)],
                     TypeMismatchError, "node s (sum): declared float32[3, 3], but sum(x: float32[3, 4]) gives float32[3]"),
    "output dtype": (X, [n("a", "relu", ["x"], T("float16", 3, 4))], TypeMismatchError, "declared float16[3, 4]"),
    "input shape": ({"x": T("float32", 3, 5)}, [n("a", "relu", ["x"], T("float32", 3, 4))], TypeMismatchError,
                    "node a (relu): declared float32[3, 4], but relu(x: float32[3, 5]) gives float32[3, 5]"),
    "dims two": (X, [n("s", "sum", ["x"], T("float32", 3), dims="two", keepdim=False)], AttributeTypeError,
                 "node s (sum): attribute dims='two' must be a list of integers"),
    "dims out of range": (X, [n("s", "sum", ["x"], T("float32", 3), dims=(2,), keepdim=False)], AttributeTypeError,
                          "outside [0, 2)"),
    "dims unsorted": (X, [n("s", "sum", ["x"], T("float32"), dims=(1, 0), keepdim=False)], AttributeTypeError,
                      "sorted"),
    "keepdim int": (X, [n("s", "sum", ["x"], T("float32", 3), dims=(1,), keepdim=1)], AttributeTypeError,
                    "keepdim=1 must be true or false"),
    "argmax dtype": (X, [n("s", "argmax", ["x"], T("float32", 3), dims=(1,), keepdim=False)], TypeMismatchError,
                     "gives int64[3]"),
    "implicit broadcast": ({"x": T("float32", 3, 4), "y": T("float32", 1, 4)},
                           [n("a", "add", ["x", "y"], T("float32", 3, 4))], TypeMismatchError,
                           "operand y is float32[1, 4] but operand x is float32[3, 4]"),
    "operand dtypes": ({"x": T("float32", 3, 4), "y": T("float16", 3, 4)},
                       [n("a", "mul", ["x", "y"], T("float32", 3, 4))], TypeMismatchError, "different dtypes"),
    "comparison result": (X, [n("c", "gt", ["x", "x"], T("float32", 3, 4))], TypeMismatchError, "gives bool[3, 4]"),
    "logical operand": (X, [n("c", "logical_not", ["x"], T("bool", 3, 4))], TypeMismatchError,
                        "operand x is float32, expected bool"),
    "where condition": (X, [n("w", "where", ["x", "x", "x"], T("float32", 3, 4))], TypeMismatchError,
                        "condition x is float32"),
    "gelu approximate": (X, [n("g", "gelu", ["x"], T("float32", 3, 4), approximate="fast")], AttributeTypeError,
                         "approximate='fast' must be one of none, tanh"),
    "reshape count": (X, [n("r", "reshape", ["x"], T("float32", 5, 2))], TypeMismatchError, "12 elements"),
    "view dtype": (X, [n("r", "reshape", ["x"], T("float16", 12))], TypeMismatchError, "gives float32"),
    "permute dims": (X, [n("p", "permute", ["x"], T("float32", 4, 3), dims=(0, 0))], AttributeTypeError,
                     "not a permutation"),
    "permute shape": (X, [n("p", "permute", ["x"], T("float32", 3, 4), dims=(1, 0))], TypeMismatchError,
                      "gives float32[4, 3]"),
    "expand rank": ({"x": T("float32", 4)}, [n("e", "expand", ["x"], T("float32", 3, 4))], TypeMismatchError,
                    "expand from rank 1 to rank 2"),
    "expand non-1 dim": (X, [n("e", "expand", ["x"], T("float32", 3, 8))], TypeMismatchError, "dim 1 of size 4 is not 1"),
    "slice past the end": (X, [n("s", "slice", ["x"], T("float32", 3, 3), dim=1, start=2, step=1)], TypeMismatchError,
                           "reads outside it"),
    "slice other dim": (X, [n("s", "slice", ["x"], T("float32", 2, 2), dim=1, start=0, step=1)], TypeMismatchError,
                        "gives float32[3, 2]"),
    "slice start type": (X, [n("s", "slice", ["x"], T("float32", 3, 2), dim=1, start="0", step=1)],
                         AttributeTypeError, "start='0'"),
    "select index": (X, [n("s", "select", ["x"], T("float32", 4), dim=0, index=3)], TypeMismatchError,
                     "out of range"),
    "take index dtype": ({"x": T("float32", 3, 4), "i": T("float32", 7)}, [n("t", "take", ["x", "i"], T("float32", 7))],
                         TypeMismatchError, "take index i is float32"),
    "take shape": ({"x": T("float32", 3, 4), "i": T("int64", 7)}, [n("t", "take", ["x", "i"], T("float32", 3, 4))],
                   TypeMismatchError, "gives float32[7]"),
    "scatter src": ({"x": T("float32", 3, 4), "i": T("int64", 5), "v": T("float32", 6)},
                    [n("t", "scatter", ["x", "i", "v"], T("float32", 3, 4), reduce="sum")], TypeMismatchError,
                    "must have one shape"),
    "scatter reduce": ({"x": T("float32", 3, 4), "i": T("int64", 5), "v": T("float32", 5)},
                       [n("t", "scatter", ["x", "i", "v"], T("float32", 3, 4), reduce="mean")], AttributeTypeError,
                       "reduce='mean'"),
    "mm sizes": ({"a": T("float32", 3, 4), "b": T("float32", 5, 6)}, [n("m", "mm", ["a", "b"], T("float32", 3, 6))],
                 TypeMismatchError, "sizes do not match"),
    "mm result": ({"a": T("float32", 3, 4), "b": T("float32", 4, 6)}, [n("m", "mm", ["a", "b"], T("float32", 3, 3))],
                  TypeMismatchError, "gives float32[3, 6]"),
    "bmm rank": ({"a": T("float32", 3, 4), "b": T("float32", 4, 6)}, [n("m", "bmm", ["a", "b"], T("float32", 3, 6))],
                 TypeMismatchError, "two rank-3 operands"),
    "full value": ({}, [n("f", "full", [], T("float32", 2), value="one")], AttributeTypeError, "value='one'"),
    "iota dim": ({}, [n("i", "iota", [], T("int64", 2), dim=1, start=0, step=1)], AttributeTypeError, "dim=1"),
    "rand operands": ({"s": T("int32", 3), "p": T("int32", 3)},
                      [n("r", "rand", ["s", "p"], T("float32", 3), distribution="uniform", offset=0)],
                      TypeMismatchError, "operand s is int32, expected int64"),
    "extern ref": (X, [n("e", "extern", [], T("float32", 3), target="aten.foo.default", args=(Ref("x"),),
                         kwargs=(), reason="r")], AttributeTypeError, "argument 'x' of aten.foo.default"),
    "getitem type": (X, [
        n("e", "extern", ["x"], T("tuple"), target="aten.sort.default", args=(Ref("x"),), kwargs=(),
          reason="r", results=((("3", "4"), "float32"), (("3", "4"), "int64"))),
        n("i", "getitem", ["e"], T("float32", 3, 4), index=1)], TypeMismatchError, "gives int64[3, 4]"),
    "getitem of a tensor": (X, [n("i", "getitem", ["x"], T("float32", 3, 4), index=0)], TypeMismatchError,
                            "not a multi-result extern"),
    "tuple read whole": (X, [
        n("e", "extern", ["x"], T("tuple"), target="aten.sort.default", args=(Ref("x"),), kwargs=(),
          reason="r", results=((("3", "4"), "float32"),)),
        n("a", "relu", ["e"], T("float32", 3, 4))], TypeMismatchError, "only getitem may"),
    "all_gather rows": (X, [n("g", "all_gather_into_tensor", ["x"], T("float32", 3, 4), group_size=2, group="0")],
                        TypeMismatchError, "gives float32[6, 4]"),
    "reduce_scatter rows": (X, [n("s", "reduce_scatter_tensor", ["x"], T("float32", 2, 4), reduce_op="sum",
                                  group_size=2, group="0")], TypeMismatchError, "over 2 ranks"),
    "reduce op": (X, [n("r", "all_reduce", ["x"], T("float32", 3, 4), reduce_op="mean", group="0")],
                  AttributeTypeError, "reduce_op='mean' must be one of sum"),
    "group": (X, [n("r", "all_reduce", ["x"], T("float32", 3, 4), reduce_op="sum", group=0)],
              AttributeTypeError, "a process group's name"),
    "all_to_all splits": (X, [n("a", "all_to_all_single", ["x"], T("float32", 3, 4), output_split_sizes=None,
                                input_split_sizes=(1, 1), group="0")], TypeMismatchError, "do not add up"),
    "pending result read": (X, [n("r", "all_reduce", ["x"], T("float32", 3, 4), reduce_op="sum", group="0"),
                                n("a", "relu", ["r"], T("float32", 3, 4))], TypeMismatchError,
                            "pending result (only wait_tensor may)"),
    "wait of a tensor": (X, [n("w", "wait_tensor", ["x"], T("float32", 3, 4))], TypeMismatchError,
                         "not a collective"),
}


@pytest.mark.parametrize("case", BAD)
def test_contradicting_documents_raise_one_line_naming_the_node(case):
    inputs, nodes, error, message = BAD[case]
    g = graph(inputs, nodes)
    with pytest.raises(error) as info:
        verify(g)
    text = str(info.value)
    assert isinstance(info.value, VerifyError) and isinstance(info.value, IRError)
    assert "\n" not in text
    assert text.startswith(f"graph g, node {nodes[-1][0]} ({nodes[-1][1]}): "), text
    assert message in text, text


def test_loads_refuses_a_document_whose_output_contradicts_its_op():
    """The issue's case: a JSON file whose reduction is declared [3, 3]."""
    g = graph(X, [n("r", "relu", ["x"], T("float32", 3, 4)),
                  n("s", "sum", ["r"], T("float32", 3), dims=(1,), keepdim=False)])
    data = json.loads(dumps(g))
    data["document"]["nodes"][1]["type"]["shape"] = ["3", "3"]
    text = json.dumps(data)
    with pytest.raises(TypeMismatchError, match=r"^graph g, node s \(sum\): declared float32\[3, 3\]"):
        loads(text)
    assert loads(text, verify=False).nodes[1].type.shape == (3, 3)  # parse only, for tools
    data["document"]["nodes"][1]["type"]["shape"] = ["3"]
    data["document"]["nodes"][1]["attrs"] = [["dims", "two"], ["keepdim", False]]
    with pytest.raises(AttributeTypeError, match="dims='two'"):
        loads(json.dumps(data))


def test_a_plan_is_verified_through_its_graph():
    from pipec_ir import Kernel, KernelPlan

    g = graph(X, [n("a", "relu", ["x"], T("float32", 3, 3))])
    plan = KernelPlan(g, "p", (Kernel("k", "pointwise", ("a",), ("a",), ("x",), (3, 3)),))
    with pytest.raises(TypeMismatchError, match="node a"):
        loads(dumps(plan))


# ---------------------------------------------------------------- symbolic sizes: no false alarms


SYMS = (SymbolRange("s0", 2, None, 5), SymbolRange("s1", 0, None, 3))


def test_symbolic_sizes_written_differently_are_the_same():
    g = graph({"x": TensorType((S0, S1), "float32")}, [
        n("r", "reshape", ["x"], TensorType((S1 * S0,), "float32")),
        n("r2", "reshape", ["r"], TensorType((S0, S1), "float32")),
        n("a", "add", ["r2", "x"], TensorType((S0, S1), "float32")),
        n("f", "full", [], TensorType((2 * S0 + 2 - 2 - S0, S1), "float32"), value=Size("s0")),
        n("m", "mul", ["a", "f"], TensorType((S0, S1), "float32")),
        # a slice counting from a dynamic end, as capture writes it
        n("s", "slice", ["m"], TensorType((S0, sympy.Max(0, S1 - sympy.Max(0, S1 - 2))), "float32"),
          dim=1, start=Size("Max(0, s1 - 2)"), step=1),
    ], symbols=SYMS)
    assert verify(g) is g
    assert loads(dumps(g)) == g


def test_undecidable_sizes_are_accepted_but_definite_ones_are_not():
    # s0*s1 elements viewed as [s0*s1 // 2, 2]: equal only when s0*s1 is even, which a guard of the
    # trace would say: accepted at the example sizes (5 * 4) ...
    g = graph({"x": TensorType((S0, S1), "float32")}, [
        n("v", "reshape", ["x"], TensorType((FloorDiv(S0 * S1, 2), 2), "float32"))],
        symbols=(SymbolRange("s0", 2, None, 5), SymbolRange("s1", 2, None, 4)))
    assert verify(g) is g
    # ... without example values too (a symbol the graph does not describe: nothing to decide with)
    assert verify(Graph(g.name, g.inputs, g.nodes, g.outputs)) is not None
    # a size that differs at the example sizes is a contradiction
    bad = graph({"x": TensorType((S0, S1), "float32")}, [
        n("a", "relu", ["x"], TensorType((S0, S1 + 1), "float32"))], symbols=SYMS)
    with pytest.raises(TypeMismatchError, match=r"declared float32\[s0, s1 \+ 1\]"):
        verify(bad)
    with pytest.raises(TypeMismatchError):  # a rank difference is always certain
        verify(graph({"x": TensorType((S0,), "float32")}, [n("a", "relu", ["x"], TensorType((S0, 1), "float32"))]))


def test_scan_combines_are_rows_of_the_op_table():
    """A scan's combine is a row (identity, floats only) the type rule and every stage read."""
    from pipec_ir.ops import IDENTITIES, SCAN_COMBINES

    assert set(SCAN_COMBINES) == {"add", "mul", "logaddexp"}
    assert all(c.identity in IDENTITIES for c in SCAN_COMBINES.values())
    assert [op for op, c in SCAN_COMBINES.items() if c.floats_only] == ["logaddexp"]


def test_scatter_reduces_are_rows_of_the_op_table():
    from pipec_ir.ops import IDENTITIES, SCATTER_REDUCES

    assert SCATTER_REDUCES["none"] is None
    assert all(i in IDENTITIES for r, i in SCATTER_REDUCES.items() if r != "none")


def test_collective_call_is_torchs_functional_collective_with_the_attributes_in_order():
    from pipec_ir.ops import collective_call

    g = graph(*GOOD["collectives"])
    nodes = g.node_map()
    assert collective_call(nodes["s"]) == ("_c10d_functional.reduce_scatter_tensor.default",
                                           (Ref("gw"), "avg", 2, "0"))
    assert collective_call(nodes["e"]) == ("_c10d_functional.all_to_all_single.default", (Ref("x"), (), (), "0"))
    assert collective_call(nodes["w"]) == ("_c10d_functional.wait_tensor.default", (Ref("s"),))
