"""`verify`: invariants of IR documents, checked at every stage boundary.

Structure (names defined before use, arity, required attributes) and types: each
node's declared shape and dtype must be what its op's type rule
(`pipec_ir.ops.OPS`, `pipec_ir.type_rules`) gives for its inputs and attributes.
"""

from __future__ import annotations

import sympy

from . import types as ir
from .errors import AttributeTypeError, TypeMismatchError, VerifyError
from .ops import COLLECTIVE_STARTS, OPS, VIEW_OPS
from .symbolic import size_symbol
from .type_rules import Context, fmt_shape, fmt_type


def verify_graph(graph: ir.Graph) -> ir.Graph:
    defined: set[str] = set()
    types: dict[str, ir.TensorType] = {}
    ctx = Context({size_symbol(s.name): sympy.Integer(s.hint) for s in graph.symbols}, {})
    for i in graph.inputs:
        _check_type(i.type, f"input {i.name}")
        if i.name in defined:
            raise VerifyError(f"graph {graph.name}: input {i.name!r} defined twice")
        if i.role not in ("input", "parameter", "buffer"):
            raise VerifyError(f"graph {graph.name}: input {i.name!r} has unknown role {i.role!r}")
        defined.add(i.name)
        types[i.name] = i.type
    for n in graph.nodes:
        _check_node(graph, n, defined)
        if n.type.dtype not in ir.DTYPES and not is_multi_result(n):  # the test first: it rarely fails
            _check_type(n.type, _where(graph, n))
        opdef = OPS[n.op]
        if opdef.rule is not None:
            _check_rule(n, opdef.rule, [types[i] for i in n.inputs], ctx, graph)
        defined.add(n.name)
        types[n.name] = n.type
        ctx.nodes[n.name] = n
    for o in graph.outputs:
        if o is not None and o not in defined:
            raise VerifyError(f"graph {graph.name}: output {o!r} is not defined")
    _check_writes(graph.writes, {i.name: i.type for i in graph.inputs}, types, f"graph {graph.name}")
    return graph


def _check_writes(writes, inputs: dict, types: dict, where: str) -> None:
    """Each write names an input once, and a value (not an input) of that input's exact type."""
    seen = set()
    for pair in writes:
        if len(pair) != 2:
            raise VerifyError(f"{where}: a write is an (input, value) pair, got {pair!r}")
        target, value = pair
        if target not in inputs:
            raise VerifyError(f"{where}: writes to {target!r}, which is not an input")
        if target in seen:
            raise VerifyError(f"{where}: input {target!r} is written twice")
        seen.add(target)
        if value not in types or value in inputs:
            raise VerifyError(f"{where}: input {target!r} is written from {value!r}, which is not a computed value")
        if types[value] != inputs[target]:
            raise VerifyError(f"{where}: input {target!r} ({inputs[target]}) is written from {value!r} "
                              f"of another type ({types[value]})")


def _where(graph: ir.Graph, n: ir.Node) -> str:
    # built only for an error: formatting it for each of a graph's thousands of nodes was a
    # good part of `verify` (and of `loads`, which verifies)
    return f"graph {graph.name}, node {n.name}"


def _check_node(graph: ir.Graph, n: ir.Node, defined: set[str]) -> None:
    """Structure: a new name, a known op, its arity and required attributes, inputs defined before."""
    if n.name in defined:
        raise VerifyError(f"{_where(graph, n)}: name defined twice")
    opdef = OPS.get(n.op)
    if opdef is None:
        raise VerifyError(f"{_where(graph, n)}: unknown op {n.op!r}")
    if opdef.arity is not None and len(n.inputs) != opdef.arity:
        raise VerifyError(f"{_where(graph, n)}: {n.op} takes {opdef.arity} inputs, got {len(n.inputs)}")
    if opdef.attrs:
        present = {k for k, _ in n.attrs}
        for key in opdef.attrs:
            if key not in present:
                raise VerifyError(f"{_where(graph, n)}: {n.op} needs attribute {key!r}")
    if not defined.issuperset(n.inputs):
        for i in n.inputs:
            if i not in defined:
                raise VerifyError(f"{_where(graph, n)}: reads {i!r}, which is not defined before it")


def _check_rule(n: ir.Node, rule, ins: list[ir.TensorType], ctx: Context, graph: ir.Graph) -> None:
    """The node's declared type against its op's type rule: one line naming node, op and mismatch."""
    if n.op != "getitem":
        for name, t in zip(n.inputs, ins):
            if t.dtype == "tuple":  # a multi-result extern
                raise TypeMismatchError(f"{_where(graph, n)} ({n.op}): reads {name}, a multi-result extern "
                                        "(only getitem may)")
    if n.op != "wait_tensor":
        for name in n.inputs:
            src = ctx.nodes.get(name)
            if src is not None and src.op in COLLECTIVE_STARTS:  # its data arrives only at the wait
                raise TypeMismatchError(f"{_where(graph, n)} ({n.op}): reads {name}, a collective's pending "
                                        "result (only wait_tensor may)")
    try:
        got = rule(n, ins, ctx)
    except (TypeMismatchError, AttributeTypeError) as exc:
        raise type(exc)(f"{_where(graph, n)} ({n.op}): {exc}") from None
    declared = n.type
    if (got.dtype is not None and declared.dtype != got.dtype) or (
            got.shape is not None and not ctx.same_shape(got.shape, declared.shape)):
        given = ", ".join(f"{name}: {fmt_type(t)}" for name, t in zip(n.inputs, ins))
        shape = "[...]" if got.shape is None else fmt_shape(got.shape)  # ? / ...: any size / shape
        raise TypeMismatchError(f"{_where(graph, n)} ({n.op}): declared {fmt_type(declared)}, but "
                                f"{n.op}({given}) gives {got.dtype or '?'}{shape}")


def is_multi_result(node: ir.Node) -> bool:
    """An extern returning several tensors: its own type is a placeholder, `getitem` picks results."""
    return node.op == "extern" and node.type.dtype == "tuple"


def _check_type(t: ir.TensorType, where: str) -> None:
    if t.dtype not in ir.DTYPES:
        raise VerifyError(f"{where}: unknown dtype {t.dtype!r}")


def verify_plan(plan: ir.KernelPlan) -> ir.KernelPlan:
    verify_graph(plan.graph)
    nodes = plan.graph.node_map()
    owner: dict[str, str] = {}
    available = {i.name for i in plan.graph.inputs}
    for k in plan.kernels:
        for n in k.nodes:
            if n not in nodes:
                raise VerifyError(f"kernel {k.name}: unknown node {n!r}")
            if nodes[n].op not in VIEW_OPS and n in owner:
                raise VerifyError(f"node {n} is computed by both {owner[n]} and {k.name}")
            owner.setdefault(n, k.name)
        for i in k.inputs:
            if i not in available:
                raise VerifyError(f"kernel {k.name} reads {i!r} before any kernel writes it")
        available.update(k.outputs)
    for o in (*plan.graph.outputs, *(value for _, value in plan.graph.writes)):
        if o is not None and o not in available:
            raise VerifyError(f"graph output {o!r} is never written by a kernel")
    return plan


def verify_program(prog: ir.Program) -> ir.Program:
    kernels = prog.kernel_map()
    available = {b.name for b in prog.inputs}
    known = available | {b.name for b in prog.buffers}
    for s in prog.steps:
        if s.kind == "launch" and s.target not in kernels:
            raise VerifyError(f"step launches unknown kernel {s.target!r}")
        if s.kind not in ("launch", "extern"):
            raise VerifyError(f"unknown step kind {s.kind!r}")
        for i in s.inputs:
            if i not in available:
                raise VerifyError(f"step {s.target} reads {i!r} before it is written")
        for o in s.outputs:
            if o not in known:
                raise VerifyError(f"step {s.target} writes undeclared buffer {o!r}")
        available.update(s.outputs)
    for o in prog.outputs:
        if o is not None and o not in available:
            raise VerifyError(f"program output {o!r} is never written")
    buffer_types = {b.name: b.type for b in prog.buffers if b.name in available}
    _check_writes(prog.writes, {b.name: b.type for b in prog.inputs}, buffer_types, f"program {prog.name}")
    return prog


def verify(doc):
    """Check a document's invariants; returns it unchanged or raises VerifyError."""
    if isinstance(doc, ir.Graph):
        return verify_graph(doc)
    if isinstance(doc, ir.KernelPlan):
        return verify_plan(doc)
    if isinstance(doc, ir.Program):
        return verify_program(doc)
    raise TypeError(f"not an IR document: {type(doc).__name__}")
