"""Lowerings of pointwise math and norms built from other pipec ops (one row per ATen overload).

Each is the textbook formula in the op's compute dtype; the formulas avoid libdevice-only
functions where a plain one is as accurate, so they also run in Triton's interpreter.
"""

from __future__ import annotations

import math

from .dtypes import acc_dtype, is_float
from .lower_reduction import reduce
from .table import NoLowering, register


def _float_result(cx, node):
    t = cx.result(node)
    if not is_float(t.dtype):
        raise NoLowering(f"{t.dtype} result")
    return t


def _un(cx, op, x, t):
    return cx.emit(op, [x], t.shape, t.dtype)


def _bin(cx, op, a, b, t):
    return cx.pointwise(op, [a, b], t.shape, t.dtype)


@register("aten.log10.default")
def lower_log10(cx, node, x):
    t = _float_result(cx, node)
    return _bin(cx, "mul", _un(cx, "log", cx.operand(x, t.shape, t.dtype), t), 1.0 / math.log(10.0), t)


@register("aten.asinh.default")
def lower_asinh(cx, node, x):
    # asinh(x) = sign(x) * log(|x| + sqrt(x^2 + 1)): odd, and no cancellation for negative x
    t = _float_result(cx, node)
    x = cx.operand(x, t.shape, t.dtype)
    a = _un(cx, "abs", x, t)
    r = _un(cx, "log", _bin(cx, "add", a, _un(cx, "sqrt", _bin(cx, "add", _un(cx, "square", a, t), 1.0, t), t), t), t)
    small = cx.pointwise("lt", [a, 1e-4], t.shape, "bool", operand_dtype=t.dtype)
    r = cx.emit("where", [small, a, r], t.shape, t.dtype)  # log(1 + a) loses a's digits near 0
    neg = cx.pointwise("lt", [x, 0.0], t.shape, "bool", operand_dtype=t.dtype)
    return cx.emit("where", [neg, _un(cx, "neg", r, t), r], t.shape, t.dtype)


@register("aten.acosh.default")
def lower_acosh(cx, node, x):
    t = _float_result(cx, node)
    x = cx.operand(x, t.shape, t.dtype)
    root = _un(cx, "sqrt", _bin(cx, "mul", _bin(cx, "sub", x, 1.0, t), _bin(cx, "add", x, 1.0, t), t), t)
    return _un(cx, "log", _bin(cx, "add", x, root, t), t)


@register("aten.atanh.default")
def lower_atanh(cx, node, x):
    # 0.5 * log((1 + x) / (1 - x)); near 0 the series x + x^3/3 keeps the digits
    t = _float_result(cx, node)
    x = cx.operand(x, t.shape, t.dtype)
    ratio = cx.emit("div", [_bin(cx, "add", x, 1.0, t), cx.pointwise("sub", [1.0, x], t.shape, t.dtype)],
                    t.shape, t.dtype)
    r = _bin(cx, "mul", _un(cx, "log", ratio, t), 0.5, t)
    cube = _bin(cx, "mul", _bin(cx, "mul", _un(cx, "square", x, t), x, t), 1.0 / 3.0, t)
    series = cx.emit("add", [x, cube], t.shape, t.dtype)
    small = cx.pointwise("lt", [_un(cx, "abs", x, t), 1e-3], t.shape, "bool", operand_dtype=t.dtype)
    return cx.emit("where", [small, series, r], t.shape, t.dtype)


@register("aten.elu.default")
def lower_elu(cx, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    t = _float_result(cx, node)
    x = cx.operand(x, t.shape, t.dtype)
    # expm1 needs libdevice; exp(x) - 1 is accurate to fp32's absolute tolerance for x <= 0
    neg = _bin(cx, "mul", _bin(cx, "sub", _un(cx, "exp", _bin(cx, "mul", x, float(input_scale), t), t), 1.0, t),
               float(alpha), t)
    pos = cx.pointwise("gt", [x, 0.0], t.shape, "bool", operand_dtype=t.dtype)
    return _bin(cx, "mul", cx.emit("where", [pos, x, neg], t.shape, t.dtype), float(scale), t)


@register("aten.leaky_relu.default")
def lower_leaky_relu(cx, node, x, negative_slope=0.01):
    t = _float_result(cx, node)
    x = cx.operand(x, t.shape, t.dtype)
    pos = cx.pointwise("gt", [x, 0.0], t.shape, "bool", operand_dtype=t.dtype)
    return cx.emit("where", [pos, x, _bin(cx, "mul", x, float(negative_slope), t)], t.shape, t.dtype)


@register("aten.linalg_vector_norm.default")
def lower_vector_norm(cx, node, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    t = _float_result(cx, node)
    acc = acc_dtype(t.dtype)
    xa = cx.cast(x, acc)
    a = cx.emit("abs", [xa], cx.shape(xa), acc)
    if ord == float("inf"):
        return cx.cast(reduce(cx, "max", a, dim, keepdim), t.dtype)
    if ord == float("-inf"):
        return cx.cast(reduce(cx, "min", a, dim, keepdim), t.dtype)
    if ord == 0:
        nz = cx.cast(cx.pointwise("ne", [xa, 0.0], cx.shape(xa), "bool", operand_dtype=acc), acc)
        return cx.cast(reduce(cx, "sum", nz, dim, keepdim, acc), t.dtype)
    if ord == 1:
        return cx.cast(reduce(cx, "sum", a, dim, keepdim, acc), t.dtype)
    if ord == 2:
        s = reduce(cx, "sum", cx.emit("mul", [a, a], cx.shape(a), acc), dim, keepdim, acc)
        return cx.cast(cx.emit("sqrt", [s], cx.shape(s), acc), t.dtype)
    raise NoLowering(f"vector norm of order {ord} (needs pow: libdevice)")


