"""pipec's own op set: small, closed, grouped by kind.

Each row: op name -> (kind, number of tensor inputs or None for variadic, required
attributes, type rule). The type rule (`pipec_ir.type_rules`) gives the node's type
from its inputs' types and its attributes; `verify` checks every node's declared
type against it (docs/IR.md, "Type rules").
Operand dtypes of pointwise ops are already promoted by capture: arithmetic ops
see operands of their own dtype; comparisons see operands of one common dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import type_rules as rules

POINTWISE, REDUCTION, VIEW, CREATION, INDEXING, MATMUL, EXTERN = (
    "pointwise", "reduction", "view", "creation", "indexing", "matmul", "extern",
)
SCAN = "scan"  # an inclusive scan along one dim (docs/IR.md, "Scans")


@dataclass(frozen=True)
class OpDef:
    kind: str
    arity: int | None  # tensor inputs; None = any number
    attrs: tuple[str, ...] = ()  # required attribute keys
    rule: rules.Rule | None = None  # type rule: (node, input types, context) -> Inferred


def _table():
    t: dict[str, OpDef] = {}
    for name in (
        "identity", "neg", "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt",
        "reciprocal", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "silu", "erf", "floor", "ceil",
        "round", "trunc", "sign", "bitwise_not", "atan", "asin", "acos", "sinh", "cosh", "square",
    ):
        t[name] = OpDef(POINTWISE, 1, rule=rules.pointwise)
    t["logical_not"] = OpDef(POINTWISE, 1, rule=rules.logical)
    t["isnan"] = OpDef(POINTWISE, 1, rule=rules.compare)
    t["isinf"] = OpDef(POINTWISE, 1, rule=rules.compare)
    t["gelu"] = OpDef(POINTWISE, 1, ("approximate",), rules.gelu)
    t["cast"] = OpDef(POINTWISE, 1, rule=rules.cast)  # to the node's dtype
    for name in (
        "add", "sub", "mul", "div", "truediv_floor", "pow", "maximum", "minimum", "bitwise_and",
        "bitwise_or", "bitwise_xor", "remainder", "fmod", "atan2",
    ):
        t[name] = OpDef(POINTWISE, 2, rule=rules.pointwise)
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        t[name] = OpDef(POINTWISE, 2, rule=rules.compare)
    for name in ("logical_and", "logical_or", "logical_xor"):
        t[name] = OpDef(POINTWISE, 2, rule=rules.logical)
    t["where"] = OpDef(POINTWISE, 3, rule=rules.where)
    # rand(seed, position): Philox(seed, offset + position) as U[0, 1) or N(0, 1) fp32 (docs/IR.md)
    t["rand"] = OpDef(POINTWISE, 2, ("distribution", "offset"), rules.rand)
    for name in ("sum", "prod", "max", "min", "argmax", "argmin", "any"):
        t[name] = OpDef(REDUCTION, 1, ("dims", "keepdim"), rules.reduction)
    # combine: "add" | "mul" | "logaddexp"
    t["scan"] = OpDef(SCAN, 1, ("dim", "combine"), rules.scan)
    t["reshape"] = OpDef(VIEW, 1, rule=rules.reshape)  # to the node's shape (row-major order)
    t["permute"] = OpDef(VIEW, 1, ("dims",), rules.permute)
    t["expand"] = OpDef(VIEW, 1, rule=rules.expand)  # broadcast to the node's shape (same rank)
    t["slice"] = OpDef(VIEW, 1, ("dim", "start", "step"), rules.slice_)
    t["select"] = OpDef(VIEW, 1, ("dim", "index"), rules.select)
    # take(src, index): src's row-major flattening read at a computed position (docs/IR.md)
    t["take"] = OpDef(INDEXING, 2, rule=rules.take)
    # scatter(self, index, src): self with src written/accumulated at flat positions index (docs/IR.md)
    t["scatter"] = OpDef(INDEXING, 3, ("reduce",), rules.scatter)
    t["full"] = OpDef(CREATION, 0, ("value",), rules.full)
    t["iota"] = OpDef(CREATION, 0, ("dim", "start", "step"), rules.iota)  # start + step * index[dim]
    t["mm"] = OpDef(MATMUL, 2, rule=rules.mm)
    t["bmm"] = OpDef(MATMUL, 2, rule=rules.mm)
    t["extern"] = OpDef(EXTERN, None, ("target", "args", "kwargs", "reason"), rules.extern)
    t["getitem"] = OpDef(EXTERN, 1, ("index",), rules.getitem)  # one result of a multi-result extern
    return t


OPS: dict[str, OpDef] = _table()

COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf"})
LOGICAL = frozenset({"logical_and", "logical_or", "logical_xor", "logical_not"})


def kind_of(op: str) -> str:
    return OPS[op].kind
