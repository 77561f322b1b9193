"""pipec's own op set: small, closed, grouped by kind.

Each row: op name -> (kind, number of tensor inputs or None for variadic).
Operand dtypes of pointwise ops are already promoted by capture: arithmetic ops
see operands of their own dtype; comparisons see operands of one common dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

POINTWISE, REDUCTION, VIEW, CREATION, INDEXING, MATMUL, EXTERN = (
    "pointwise", "reduction", "view", "creation", "indexing", "matmul", "extern",
)
SCAN = "scan"  # an inclusive scan along one dim (docs/IR.md, "Scans")


@dataclass(frozen=True)
class OpDef:
    kind: str
    arity: int | None  # tensor inputs; None = any number
    attrs: tuple[str, ...] = ()  # required attribute keys


def _table():
    t: dict[str, OpDef] = {}
    for name in (
        "identity", "neg", "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt",
        "reciprocal", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "silu", "erf", "floor", "ceil",
        "round", "trunc", "sign", "logical_not", "bitwise_not", "isnan", "isinf", "atan", "asin",
        "acos", "sinh", "cosh", "square",
    ):
        t[name] = OpDef(POINTWISE, 1)
    t["gelu"] = OpDef(POINTWISE, 1, ("approximate",))
    t["cast"] = OpDef(POINTWISE, 1)  # to the node's dtype
    for name in (
        "add", "sub", "mul", "div", "truediv_floor", "pow", "maximum", "minimum", "eq", "ne", "lt", "le",
        "gt", "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
        "bitwise_xor", "remainder", "fmod", "atan2",
    ):
        t[name] = OpDef(POINTWISE, 2)
    t["where"] = OpDef(POINTWISE, 3)
    # rand(seed, position): Philox(seed, offset + position) as U[0, 1) or N(0, 1) fp32 (docs/IR.md)
    t["rand"] = OpDef(POINTWISE, 2, ("distribution", "offset"))
    for name in ("sum", "prod", "max", "min", "argmax", "argmin", "any"):
        t[name] = OpDef(REDUCTION, 1, ("dims", "keepdim"))
    t["scan"] = OpDef(SCAN, 1, ("dim", "combine"))  # combine: "add" | "mul" | "logaddexp"
    t["reshape"] = OpDef(VIEW, 1)  # to the node's shape (row-major order)
    t["permute"] = OpDef(VIEW, 1, ("dims",))
    t["expand"] = OpDef(VIEW, 1)  # broadcast to the node's shape (same rank)
    t["slice"] = OpDef(VIEW, 1, ("dim", "start", "step"))
    t["select"] = OpDef(VIEW, 1, ("dim", "index"))
    # take(src, index): src's row-major flattening read at a computed position (docs/IR.md)
    t["take"] = OpDef(INDEXING, 2)
    # scatter(self, index, src): self with src written/accumulated at flat positions index (docs/IR.md)
    t["scatter"] = OpDef(INDEXING, 3, ("reduce",))
    t["full"] = OpDef(CREATION, 0, ("value",))
    t["iota"] = OpDef(CREATION, 0, ("dim", "start", "step"))  # start + step * index[dim]
    t["mm"] = OpDef(MATMUL, 2)
    t["bmm"] = OpDef(MATMUL, 2)
    t["extern"] = OpDef(EXTERN, None, ("target", "args", "kwargs", "reason"))
    t["getitem"] = OpDef(EXTERN, 1, ("index",))  # one result of a multi-result extern
    return t


OPS: dict[str, OpDef] = _table()

COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf"})
LOGICAL = frozenset({"logical_and", "logical_or", "logical_xor", "logical_not"})


def kind_of(op: str) -> str:
    return OPS[op].kind
