"""Lowerings of cumulative ops to the `scan` op, one row per ATen overload (docs/IR.md, "Scans").

Dtypes follow eager: the input is cast to the result dtype first (cumsum/cumprod of an int or
bool input without `dtype` give int64), and the scan combines values of that dtype (codegen
accumulates half types in float32 and integers in int64). A scan of one element is the element
itself, so a 0-d input or a size-1 scan dim becomes an `identity` (or `cast`), and a statically
empty result a `full`: codegen never sees a trivial scan.
"""

from __future__ import annotations

from pipec_ir import Ref
from pipec_ir.ops import SCAN_COMBINES
from pipec_ir.symbolic import numel

from .builder import GraphBuilder, wrap_dim
from .dtypes import is_float
from .table import NoLowering, register


def lower_scan(cx: GraphBuilder, node, x: Ref, dim: int, combine: str) -> Ref:
    t = cx.result(node)
    if t.dtype == "bool":
        raise NoLowering("a bool scan result (eager has no bool cumsum/cumprod kernel)")
    if SCAN_COMBINES[combine].floats_only and not is_float(t.dtype):
        raise NoLowering(f"logcumsumexp of dtype {t.dtype}")
    shape = tuple(cx.shape(x))
    dim = wrap_dim(dim, len(shape))  # a 0-d tensor takes dim 0 or -1
    y = cx.cast(x, t.dtype)
    if not shape or shape[dim] == 1:
        return y if y != x else cx.emit("identity", [x], shape, t.dtype)
    if numel(shape) == 0:
        return cx.full(0, shape, t.dtype)  # nothing to compute; any value is correct
    return cx.emit("scan", [y], shape, t.dtype, dim=dim, combine=combine)


@register("aten.cumsum.default")
def lower_cumsum(cx, node, x, dim, *, dtype=None):
    return lower_scan(cx, node, x, dim, "add")


@register("aten.cumprod.default")
def lower_cumprod(cx, node, x, dim, *, dtype=None):
    return lower_scan(cx, node, x, dim, "mul")


@register("aten.logcumsumexp.default", "aten._logcumsumexp.default")
def lower_logcumsumexp(cx, node, x, dim):
    return lower_scan(cx, node, x, dim, "logaddexp")
