"""pipec's own op set: small, closed, grouped by kind.

Each row: op name -> (kind, number of tensor inputs or None for variadic, required
attributes, type rule, and for a reduction what it means: `Reduction`). The type rule (`pipec_ir.type_rules`) gives the node's type
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
COLLECTIVE = "collective"  # communication through torch.distributed (docs/IR.md, "Collectives")

# A collective's `reduce_op` attribute: torch's functional-collective names (c10d ReduceOp).
COLLECTIVE_REDUCE_OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor")


@dataclass(frozen=True)
class Reduction:
    """What a reduction op computes, for every stage to build its own row from (capture's
    lowering, the reference interpreter, codegen's accumulators; fusion needs only the kind).

    identity: the element of the input's dtype that changes no result: "zero", "one",
      "lowest" or "highest" (for argmax/argmin: of the values compared).
    result_dtype: None = the input's dtype (capture casts the input to the result's dtype
      first); otherwise the result's dtype whatever the input's.
    indexed: the result is the position of the value picked (argmax/argmin), row-major over
      the reduced dims, the first one on ties.
    """
    identity: str
    result_dtype: str | None = None
    indexed: bool = False


IDENTITIES = ("zero", "one", "lowest", "highest")


@dataclass(frozen=True)
class ScanCombine:
    """What a `scan`'s `combine` attribute means (docs/IR.md, "Scans"): its identity (as a
    `Reduction`'s), and whether it takes floating-point inputs only."""
    identity: str
    floats_only: bool = False


# One row per scan combine; each stage builds its own row from these (codegen's scan.py,
# the reference interpreter, capture's lower_scan.py).
SCAN_COMBINES = {
    "add": ScanCombine("zero"),
    "mul": ScanCombine("one"),
    "logaddexp": ScanCombine("lowest", floats_only=True),
}

# A `scatter`'s `reduce` attribute -> the identity it accumulates from (None: a plain write),
# named as a `Reduction`'s (docs/IR.md, `scatter`).
SCATTER_REDUCES = {"none": None, "sum": "zero", "amax": "lowest", "amin": "highest"}


@dataclass(frozen=True)
class OpDef:
    kind: str
    arity: int | None  # tensor inputs; None = any number
    attrs: tuple[str, ...] = ()  # required attribute keys
    rule: rules.Rule | None = None  # type rule: (node, input types, context) -> Inferred
    reduction: Reduction | None = None  # a REDUCTION row's meaning


# One row per reduction op (tinygrad's identity_element, as a table).
_REDUCTIONS = {
    "sum": Reduction("zero"),
    "prod": Reduction("one"),
    "max": Reduction("lowest"),
    "min": Reduction("highest"),
    "argmax": Reduction("lowest", "int64", indexed=True),
    "argmin": Reduction("highest", "int64", indexed=True),
    "any": Reduction("zero", "bool"),  # of the input taken as bool (capture casts it first)
}


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
    for name, meaning in _REDUCTIONS.items():
        t[name] = OpDef(REDUCTION, 1, ("dims", "keepdim"), rules.reduction_to(meaning.result_dtype), meaning)
    t["scan"] = OpDef(SCAN, 1, ("dim", "combine"), rules.scan_over(SCAN_COMBINES))  # combine: a SCAN_COMBINES key
    t["reshape"] = OpDef(VIEW, 1, rule=rules.reshape)  # to the node's shape (row-major order)
    t["permute"] = OpDef(VIEW, 1, ("dims",), rules.permute)
    t["expand"] = OpDef(VIEW, 1, rule=rules.expand)  # broadcast to the node's shape (same rank)
    t["slice"] = OpDef(VIEW, 1, ("dim", "start", "step"), rules.slice_)
    t["select"] = OpDef(VIEW, 1, ("dim", "index"), rules.select)
    # take(src, index): src's row-major flattening read at a computed position (docs/IR.md)
    t["take"] = OpDef(INDEXING, 2, rule=rules.take)
    # scatter(self, index, src): self with src written/accumulated at flat positions index (docs/IR.md)
    t["scatter"] = OpDef(INDEXING, 3, ("reduce",), rules.scatter_over(SCATTER_REDUCES))
    t["full"] = OpDef(CREATION, 0, ("value",), rules.full)
    t["iota"] = OpDef(CREATION, 0, ("dim", "start", "step"), rules.iota)  # start + step * index[dim]
    t["mm"] = OpDef(MATMUL, 2, rule=rules.mm)
    t["bmm"] = OpDef(MATMUL, 2, rule=rules.mm)
    # collectives (docs/IR.md, "Collectives"): each starts communication on process group
    # `group` (torch's group name) and gives a pending result that only `wait_tensor` makes ready
    # (attributes in torch's argument order: `collective_call`)
    t["all_reduce"] = OpDef(COLLECTIVE, 1, ("reduce_op", "group"), rules.all_reduce_over(COLLECTIVE_REDUCE_OPS))
    t["all_gather_into_tensor"] = OpDef(COLLECTIVE, 1, ("group_size", "group"), rules.all_gather)
    t["reduce_scatter_tensor"] = OpDef(COLLECTIVE, 1, ("reduce_op", "group_size", "group"),
                                       rules.reduce_scatter_over(COLLECTIVE_REDUCE_OPS))
    t["all_to_all_single"] = OpDef(COLLECTIVE, 1, ("output_split_sizes", "input_split_sizes", "group"),
                                   rules.all_to_all)
    t["wait_tensor"] = OpDef(COLLECTIVE, 1, rule=rules.wait_for(
        tuple(op for op, d in t.items() if d.kind == COLLECTIVE)))
    t["extern"] = OpDef(EXTERN, None, ("target", "args", "kwargs", "reason"), rules.extern)
    t["getitem"] = OpDef(EXTERN, 1, ("index",), rules.getitem)  # one result of a multi-result extern
    return t


OPS: dict[str, OpDef] = _table()

# `extern` reasons (docs/IR.md) that name a call made on purpose, not a missing lowering: a vendor
# library's op, a random op left to torch's generator on request, a library's own custom op.
# Capture allows them under fullgraph and the pipeline does not warn about them.
INTENDED_EXTERN_REASONS = frozenset({"library", "fallback_random", "custom op"})


def ops_of_kind(kind: str) -> frozenset[str]:
    """The ops of one kind, read off the table (never spelled out again elsewhere)."""
    return frozenset(op for op, d in OPS.items() if d.kind == kind)


POINTWISE_OPS = ops_of_kind(POINTWISE)
REDUCTION_OPS = ops_of_kind(REDUCTION)
SCAN_OPS = ops_of_kind(SCAN)
VIEW_OPS = ops_of_kind(VIEW)
CREATION_OPS = ops_of_kind(CREATION)
MATMUL_OPS = ops_of_kind(MATMUL)
COLLECTIVE_OPS = ops_of_kind(COLLECTIVE)
# collectives that start communication (each read by one `wait_tensor`)
COLLECTIVE_STARTS = COLLECTIVE_OPS - {"wait_tensor"}
# pointwise ops whose operands share one dtype other than the result's (bool): by type rule
COMPARISONS = frozenset(op for op, d in OPS.items() if d.rule is rules.compare)
LOGICAL = frozenset(op for op, d in OPS.items() if d.rule is rules.logical)


def kind_of(op: str) -> str:
    return OPS[op].kind


def reduction_of(op: str) -> Reduction:
    """The meaning of reduction op `op` (its row's `Reduction`)."""
    meaning = OPS[op].reduction
    if meaning is None:
        raise KeyError(f"{op!r} is not a reduction op")
    return meaning


def collective_call(node) -> tuple[str, tuple]:
    """What collective node `node` means in torch: the `torch.ops._c10d_functional` overload of
    the same name and its arguments, the input (a `Ref`) then the row's attributes, which are
    listed in torch's argument order. Stages that run a collective (the runtime, reference
    interpreters) call exactly this; null split sizes are torch's [] (equal splits)."""
    from .types import Ref

    if node.op not in COLLECTIVE_OPS:
        raise KeyError(f"{node.op!r} is not a collective op")
    attrs = tuple(() if node.attr(k) is None else node.attr(k) for k in OPS[node.op].attrs)
    return f"_c10d_functional.{node.op}.default", (Ref(node.inputs[0]),) + attrs
