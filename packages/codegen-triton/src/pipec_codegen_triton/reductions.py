"""Codegen's row per reduction op: how a Triton kernel accumulates a row and finishes it.

The meaning comes from the IR row (`pipec_ir.ops.Reduction`: the identity, whether the op
returns an index); this table adds only the Triton spelling. Adding a reduction op is one
IR row, one lowering row (capture) and one row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipec_ir.ops import reduction_of

from .dtypes import FLOAT_COMPUTE, highest, lowest


@dataclass(frozen=True)
class TritonReduction:
    """combine: one step of a looped row, the new accumulator from `{acc}` and the masked
    block `{x}` (an indexed op steps a (value, index) pair through `fn` instead).
    finish: the [XBLOCK, RBLOCK] accumulator `{acc}` reduced along the row to [XBLOCK, 1].
    fn: the combine function for the input's dtype, `{fn}` in both (None: not needed).
    accumulator: the Triton dtype a looped row accumulates in (None: the input's compute type).
    """
    combine: str
    finish: str
    fn: Callable[[str], str] | None = None
    accumulator: str | None = None


def _nan_propagating(op: str) -> Callable[[str], str]:
    """max/min that keep a NaN, as torch.amax does: one max.NaN instruction for floats."""
    def fn(dtype: str) -> str:
        if dtype in FLOAT_COMPUTE:
            return "_pipec_fmax" if op == "max" else "_pipec_fmin"
        return "_pipec_maximum" if op == "max" else "_pipec_minimum"
    return fn


TRITON_REDUCTIONS: dict[str, TritonReduction] = {
    "sum": TritonReduction("{acc} + {x}", "tl.sum({acc}, 1)[:, None]"),
    "any": TritonReduction("{acc} | ({x} != 0).to(tl.int32)", "(tl.sum(({acc} != 0).to(tl.int32), 1) > 0)[:, None]",
                           accumulator="tl.int32"),
    "prod": TritonReduction("{acc} * {x}", "tl.reduce({acc}, 1, _pipec_product)[:, None]"),
    "max": TritonReduction("{fn}({acc}, {x})", "tl.reduce({acc}, 1, {fn})[:, None]", _nan_propagating("max")),
    "min": TritonReduction("{fn}({acc}, {x})", "tl.reduce({acc}, 1, {fn})[:, None]", _nan_propagating("min")),
    # indexed (the IR row says so): `fn` combines (value, index) pairs, smallest index on ties
    "argmax": TritonReduction("", "", lambda dtype: "_pipec_argmax"),
    "argmin": TritonReduction("", "", lambda dtype: "_pipec_argmin"),
}


def identity_literal(op: str, dtype: str) -> str:
    """The Triton literal of reduction `op`'s identity for an input of `dtype`."""
    return literal_of_identity(reduction_of(op).identity, dtype)


def literal_of_identity(identity: str, dtype: str) -> str:
    """The Triton literal of an identity named as pipec_ir.ops names them ("zero", "lowest", ...)."""
    if identity == "lowest":
        return lowest(dtype)
    if identity == "highest":
        return highest(dtype)
    return {"zero": "0", "one": "1"}[identity]
