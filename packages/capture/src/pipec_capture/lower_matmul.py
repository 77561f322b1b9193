"""Lowerings of matrix products (mm, bmm, and addmm / baddbmm as a product plus a bias)."""

from __future__ import annotations

from .table import NoLowering, register


def _same_dtype(cx, a, b):
    if cx.dtype(a) != cx.dtype(b):
        raise NoLowering(f"matmul operands of different dtypes ({cx.dtype(a)}, {cx.dtype(b)})")


@register("aten.mm.default")
def lower_mm(cx, node, a, b):
    t = cx.result(node)
    _same_dtype(cx, a, b)
    return cx.emit("mm", [a, b], t.shape, t.dtype)


@register("aten.bmm.default")
def lower_bmm(cx, node, a, b):
    t = cx.result(node)
    _same_dtype(cx, a, b)
    return cx.emit("bmm", [a, b], t.shape, t.dtype)


def _plus_bias(cx, op, node, bias, a, b, beta, alpha):
    t = cx.result(node)
    _same_dtype(cx, a, b)
    p = cx.emit(op, [a, b], t.shape, t.dtype)
    if alpha != 1:
        p = cx.pointwise("mul", [p, alpha], t.shape, t.dtype)
    if beta == 0:
        return p
    c = cx.operand(bias, t.shape, t.dtype)
    if beta != 1:
        c = cx.emit("mul", [c, cx.full(beta, t.shape, t.dtype)], t.shape, t.dtype)
    return cx.emit("add", [p, c], t.shape, t.dtype)


@register("aten.addmm.default")
def lower_addmm(cx, node, bias, a, b, *, beta=1, alpha=1):
    return _plus_bias(cx, "mm", node, bias, a, b, beta, alpha)


@register("aten.baddbmm.default")
def lower_baddbmm(cx, node, bias, a, b, *, beta=1, alpha=1):
    return _plus_bias(cx, "bmm", node, bias, a, b, beta, alpha)
