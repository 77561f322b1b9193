"""`dumps` and `loads` take specialised paths (an encoder and a decoder built once per IR type);
the generic walks (`to_jsonable`, `from_jsonable`) define the result. These tests hold the two
to the same output, also on documents whose fields hold other types than declared."""

import json
import re

import pytest
import sympy
from pipec_ir import (
    Buffer, FusionDecision, Graph, GraphInput, Kernel, KernelPlan, LaunchConfig, MalformedIRError, Node, Program,
    Ref, Size, Step, TensorType, TritonKernel, dumps, loads, make_attrs,
)
from pipec_ir import types as ir
from pipec_ir.serialize import FORMAT, VERSION, to_jsonable
from pipec_ir.symbolic import size_symbol

S0 = size_symbol("s0")
T = TensorType((sympy.Integer(4), S0), "float32")


def generic_dumps(doc) -> str:
    """What `dumps` gave before it had a specialised encoder: the definition."""
    payload = {"format": FORMAT, "kind": ir.KIND_OF[type(doc)], "version": list(VERSION), "document": to_jsonable(doc)}
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)


def graph(nodes=None, outputs=("a",)):
    nodes = nodes or (Node("a", "add", ("x", "x"), T, make_attrs(alpha=1.5, ref=Ref("x"), lo=float("-inf"))),)
    return Graph("g", (GraphInput("x", T),), nodes, outputs)


def plan(score=1.0, domain=(sympy.Integer(4), S0)):
    return KernelPlan(graph(), "default", (Kernel("k0", "pointwise", ("a",), ("a",), ("x",), domain),),
                      (FusionDecision("k0", ("a",), ("a",), "vertical", score),))


def program(constants=(("XBLOCK", 128),), outputs=("y",)):
    kernel = TritonKernel("k0", "src", ("x", "y"), (("n", S0 * 4),), ((S0 * 4, "XBLOCK"),),
                          (LaunchConfig(constants),))
    return Program("p", (Buffer("x", T),), outputs, (Buffer("y", T, 0),), (kernel,),
                   (Step("launch", "k0", ("x",), ("y",)),), symbols=(), peak_bytes=S0 * 16)


@pytest.mark.parametrize("doc", [
    graph(),
    plan(),
    program(),
    # values of another type than their field declares: the generic walk decides
    plan(score=float("nan")),  # written as {"$float": "nan"}
    plan(domain=(4, S0)),  # a plain int in a size field stays a JSON number
    program(constants=(("XBLOCK", sympy.Integer(128)),)),  # a sympy number in an int field
    program(outputs=("y", ("a", "b", "c"))),  # a tuple in a `str | None` field
    graph(outputs=["a"]),  # a list for a tuple
    graph(nodes=(Node("a", "add", ("x", "x"), TensorType((4, S0), "float32"), make_attrs(size=Size("s0 - 1"))),)),
], ids=lambda d: type(d).__name__)
def test_dumps_is_the_generic_walk(doc):
    assert dumps(doc) == generic_dumps(doc)


def test_dumps_fails_where_the_generic_walk_fails():
    doc = graph(nodes=(Node("a", "add", ("x", "x"), TensorType([4, S0], "float32")),))  # a list of sympy sizes
    with pytest.raises(TypeError, match="Symbol is not JSON serializable"):
        generic_dumps(doc)
    with pytest.raises(TypeError, match="Symbol is not JSON serializable"):
        dumps(doc)


@pytest.mark.parametrize("doc", [graph(), plan(), plan(score=float("inf")), program()], ids=lambda d: type(d).__name__)
def test_loads_round_trips(doc):
    text = dumps(doc)
    back = loads(text)
    assert back == doc
    assert dumps(back) == text


def test_loads_fills_omitted_fields_with_their_defaults():
    doc = json.loads(dumps(program()))
    body = doc["document"]
    del body["peak_bytes"], body["slots"], body["buffers"][0]["slot"]  # default_factory, default, a nested default
    back = loads(json.dumps(doc))
    assert back.peak_bytes == sympy.Integer(0) and back.slots == () and back.buffers[0].slot is None


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["graph"]["nodes"][0].pop("op"), "document.graph.nodes[0]: Node is missing field 'op'"),
    (lambda d: d["graph"]["nodes"][0]["inputs"].append(3), "document.graph.nodes[0].inputs[2]: expected str, got 3"),
    (lambda d: d["graph"]["nodes"][0]["type"]["shape"].append(None),
     "document.graph.nodes[0].type.shape[2]: expected a size expression string, got None"),
    (lambda d: d["fusions"][0].update(score="high"), "document.fusions[0].score: expected a number, got 'high'"),
    (lambda d: d["kernels"][0].update(extra=1), "document.kernels[0]: unknown field(s) ['extra'] in Kernel"),
])
def test_malformed_documents_still_name_the_field(edit, message):
    doc = json.loads(dumps(plan()))
    edit(doc["document"])
    with pytest.raises(MalformedIRError) as info:
        loads(json.dumps(doc))
    assert str(info.value) == message


def test_tensor_types_decoded_once_are_still_checked_each_time():
    """Node types are memoised by their JSON (`_tensor_type`); what is not a plain shape of strings
    and a dtype string must still meet the general decoder and its errors."""
    text = dumps(graph())
    first, second = loads(text), loads(text)
    assert first == second and first.nodes[0].type == T
    as_ints = text.replace('"shape":["4","s0"]', '"shape":[4,"s0"]')
    assert loads(as_ints) == first  # an int size: the general path, the same type
    for bad, message in [
        ('"shape":[true,"s0"]', "expected a size expression string, got True"),  # true hashes like 1
        ('"shape":["4","s0"],"bogus":1', "unknown field(s) ['bogus'] in TensorType"),
        ('"shape":["4","s0 +"]', "cannot parse size expression 's0 +'"),
    ]:
        with pytest.raises(MalformedIRError, match=re.escape(message)):
            loads(text.replace('"shape":["4","s0"]', bad, 1))
