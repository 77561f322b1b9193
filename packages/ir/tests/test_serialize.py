import json

import pytest
import sympy
from pipec_ir import (
    VERSION, Graph, GraphInput, IRError, MalformedIRError, Node, Ref, Size, TensorType,
    UnsupportedVersionError, VerifyError, WrongKindError, digest, dumps, format_document, loads, make_attrs, verify,
)
from pipec_ir.symbolic import size_symbol


def sample_graph():
    s0 = size_symbol("s0")
    t = TensorType((sympy.Integer(4), s0), "float32")
    return Graph(
        "g",
        (GraphInput("x", t), GraphInput("w", t, "parameter")),
        (
            Node("a", "add", ("x", "w"), t),
            Node("m", "max", ("a",), TensorType((sympy.Integer(4), sympy.Integer(1)), "float32"),
                 make_attrs(dims=(1,), keepdim=True)),
            Node("e", "extern", ("a",), t, make_attrs(target="aten.foo.default", args=(Ref("a"), float("-inf")),
                                                       kwargs=(), reason="no lowering for aten.foo")),
        ),
        ("m", "e", None),
    )


def test_round_trip_is_equal_and_canonical():
    g = sample_graph()
    text = dumps(g)
    assert loads(text) == g
    assert dumps(loads(text)) == text
    assert json.loads(text)["version"] == list(VERSION)
    assert digest(g) == digest(loads(text))


def test_digest_changes_with_content():
    g = sample_graph()
    other = Graph(g.name, g.inputs, g.nodes[:1], ("a",))
    assert digest(g) != digest(other)


@pytest.mark.parametrize("mutate, error", [
    (lambda s: s[: len(s) // 2], MalformedIRError),
    (lambda s: s.replace(f'"version":[{VERSION[0]},{VERSION[1]}]', '"version":[9,0]'), UnsupportedVersionError),
    (lambda s: s.replace('"format":"pipec-ir"', '"format":"other"'), MalformedIRError),
    (lambda s: s.replace('"shape":["4","s0"]', '"shape":[true]', 1), MalformedIRError),
    (lambda s: s.replace('"op":"add"', '"op":7'), MalformedIRError),
    (lambda s: s.replace('"inputs":["x","w"]', '"inputs":["x","w"],"bogus":1'), MalformedIRError),
    (lambda s: s.replace('"shape":["4","s0"]', '"shape":["4+"]', 1), MalformedIRError),
])
def test_bad_documents_raise_typed_errors(mutate, error):
    with pytest.raises(error) as info:
        loads(mutate(dumps(sample_graph())))
    assert isinstance(info.value, IRError)
    assert "\n" not in str(info.value)


def test_wrong_kind():
    with pytest.raises(WrongKindError):
        loads(dumps(sample_graph()), kind="program")


def test_verify_catches_dangling_names_and_arity():
    g = sample_graph()
    t = g.nodes[0].type
    with pytest.raises(VerifyError, match="not defined"):
        verify(Graph("g", g.inputs, (Node("a", "add", ("x", "nope"), t),), ("a",)))
    with pytest.raises(VerifyError, match="takes 2 inputs"):
        verify(Graph("g", g.inputs, (Node("a", "add", ("x",), t),), ("a",)))
    with pytest.raises(VerifyError, match="unknown op"):
        verify(Graph("g", g.inputs, (Node("a", "frobnicate", ("x",), t),), ("a",)))
    with pytest.raises(VerifyError, match="attribute"):
        verify(Graph("g", g.inputs, (Node("a", "sum", ("x",), t),), ("a",)))


def test_writes_to_inputs_round_trip_and_are_verified():
    """`writes` (1.7): an input updated in place holds a computed value of its exact type."""
    g = sample_graph()
    written = Graph(g.name, g.inputs, g.nodes, g.outputs, writes=(("w", "a"),))
    assert loads(dumps(written)) == written
    assert "w <- a  # the input holds it after a run" in format_document(written)
    bad = {
        "not an input": (("a", "a"),),
        "written twice": (("w", "a"), ("w", "e")),
        "not a computed value": (("w", "x"),),
        "of another type": (("w", "m"),),
    }
    for message, writes in bad.items():
        with pytest.raises(VerifyError, match=message):
            verify(Graph(g.name, g.inputs, g.nodes, g.outputs, writes=writes))


def test_text_form_has_one_line_per_node_with_type():
    text = format_document(sample_graph())
    assert "a = add(x, w)  # float32[4, s0]" in text
    assert "m = max(a, dims=[1], keepdim=True)  # float32[4, 1]" in text


def test_size_attributes_round_trip_and_reject_garbage():
    s0 = size_symbol("s0")
    t = TensorType((s0, sympy.Integer(4)), "float32")
    g = Graph("g", (GraphInput("x", t),), (
        Node("n", "full", (), t, make_attrs(value=Size("Max(0, s0 - 1)"))),
        Node("v", "slice", ("x",), TensorType((sympy.Integer(3), sympy.Integer(4)), "float32"),
             make_attrs(dim=0, start=Size("s0 - 3"), step=1)),
    ), ("n", "v"))
    text = dumps(g)
    assert '{"$size":"s0 - 3"}' in text
    back = loads(text)
    assert back == g and back.nodes[1].attr("start").value == s0 - 3
    assert "start=(s0 - 3)" in format_document(g)
    with pytest.raises(MalformedIRError, match="size expression"):
        loads(text.replace('"s0 - 3"', '"s0 -"'))
