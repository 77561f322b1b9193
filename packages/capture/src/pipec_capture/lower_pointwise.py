"""Lowerings of pointwise arithmetic, comparisons, casts, copies, aliases and creation ops."""

from __future__ import annotations

import sympy

from pipec_ir import Ref

from .builder import GraphBuilder, scalar_value
from .dtypes import ir_dtype, is_float
from .errors import CaptureError
from .table import LOWERINGS, NoLowering, op_name, register


def _binary(op: str):
    def lower(cx: GraphBuilder, node, a, b, *, alpha=1):
        t = cx.result(node)
        if alpha != 1:
            b = cx.pointwise("mul", [b, alpha], t.shape, t.dtype)
        return cx.pointwise(op, [a, b], t.shape, t.dtype)
    lower.__name__ = f"lower_{op}"
    return lower


for _op in ("add", "sub"):
    register(f"aten.{_op}.Tensor", f"aten.{_op}.Scalar")(_binary(_op))
for _op in ("mul", "maximum", "minimum", "remainder", "fmod", "atan2", "bitwise_and", "bitwise_or",
            "bitwise_xor"):
    _f = _binary(_op)
    for _ov in ("Tensor", "Scalar", "default"):
        LOWERINGS[f"aten.{_op}.{_ov}"] = _f


@register("prims.fma.default")
def lower_fma(cx, node, a, b, c):
    """a * b + c: what Dynamo makes of `addcmul_` / `addcdiv_` with a value and of `add_` with a
    tensor alpha (its own decompositions, Inductor's prim), as in every optimizer's single-tensor
    step. The prim's eager kernel computes a * b, then adds: two ops, as here."""
    t = cx.result(node)
    return cx.pointwise("add", [cx.pointwise("mul", [a, b], t.shape, t.dtype), c], t.shape, t.dtype)


@register("aten.rsub.Tensor", "aten.rsub.Scalar")
def lower_rsub(cx, node, a, b, *, alpha=1):
    t = cx.result(node)
    if alpha != 1:
        a = cx.pointwise("mul", [a, alpha], t.shape, t.dtype)
    return cx.pointwise("sub", [b, a], t.shape, t.dtype)


# true_divide is div's alias (torch's nearest-upsample decomposition at symbolic sizes divides
# the input's size by the output's with it: diffusers' UNets under dynamic shapes)
@register("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode",
          "aten.true_divide.Tensor", "aten.true_divide.Scalar")
def lower_div(cx, node, a, b, *, rounding_mode=None):
    t = cx.result(node)
    if rounding_mode is None:
        return cx.pointwise("div", [a, b], t.shape, t.dtype)
    if not is_float(t.dtype):
        if rounding_mode == "floor":
            return cx.pointwise("truediv_floor", [a, b], t.shape, t.dtype)
        if rounding_mode == "trunc":  # a - fmod(a, b) is a multiple of b: its floor quotient is exact
            rest = cx.pointwise("sub", [a, cx.pointwise("fmod", [a, b], t.shape, t.dtype)], t.shape, t.dtype)
            return cx.pointwise("truediv_floor", [rest, b], t.shape, t.dtype)
        raise NoLowering(f"integer division with rounding_mode={rounding_mode!r}")
    q = cx.pointwise("div", [a, b], t.shape, t.dtype)
    return cx.emit("floor" if rounding_mode == "floor" else "trunc", [q], t.shape, t.dtype)


@register("aten.floor_divide.default", "aten.floor_divide.Scalar")
def lower_floor_divide(cx, node, a, b):
    return lower_div(cx, node, a, b, rounding_mode="floor")


@register("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def lower_pow(cx, node, a, b):
    t = cx.result(node)
    if not isinstance(b, Ref) and isinstance(a, Ref) and not isinstance(b, sympy.Expr):
        if b == 2:
            x = cx.operand(a, t.shape, t.dtype)
            return cx.emit("mul", [x, x], t.shape, t.dtype)
        if b == 3 and is_float(t.dtype):  # ATen's kernel computes base * base * base too; as
            # multiplies, GELU-tanh's cube stays inside a matmul epilogue (no libdevice pow)
            x = cx.operand(a, t.shape, t.dtype)
            return cx.emit("mul", [cx.emit("mul", [x, x], t.shape, t.dtype), x], t.shape, t.dtype)
        if b == 1:
            return cx.emit("identity", [cx.operand(a, t.shape, t.dtype)], t.shape, t.dtype)
        if b == 0.5 and is_float(t.dtype):
            return cx.emit("sqrt", [cx.operand(a, t.shape, t.dtype)], t.shape, t.dtype)
    return cx.pointwise("pow", [a, b], t.shape, t.dtype)


def _unary(op: str, operand: str = "result"):
    """operand: "result" = cast the input to the result dtype; "bool"; "same" = leave it."""
    def lower(cx: GraphBuilder, node, x, *rest, **kw):
        t = cx.result(node)
        if operand == "result":
            dt = t.dtype
        elif operand == "bool":
            dt = "bool"
        else:
            dt = cx.dtype(x) if isinstance(x, Ref) else t.dtype
        return cx.emit(op, [cx.operand(x, t.shape, dt)], t.shape, t.dtype)
    lower.__name__ = f"lower_{op}"
    return lower


for _op in ("neg", "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal",
            "sin", "cos", "tan", "tanh", "sigmoid", "relu", "silu", "erf", "floor", "ceil", "trunc", "sign",
            "atan", "asin", "acos", "sinh", "cosh", "square"):
    LOWERINGS[f"aten.{_op}.default"] = _unary(_op)
LOWERINGS["aten.round.default"] = _unary("round")
LOWERINGS["aten.logical_not.default"] = _unary("logical_not", "bool")
LOWERINGS["aten.isnan.default"] = _unary("isnan", "same")
LOWERINGS["aten.isinf.default"] = _unary("isinf", "same")


@register("aten.bitwise_not.default")
def lower_bitwise_not(cx, node, x):
    t = cx.result(node)
    return cx.emit("bitwise_not", [cx.operand(x, t.shape, t.dtype)], t.shape, t.dtype)


@register("aten.gelu.default")
def lower_gelu(cx, node, x, approximate="none"):
    t = cx.result(node)
    return cx.emit("gelu", [cx.operand(x, t.shape, t.dtype)], t.shape, t.dtype, approximate=approximate)


def _compare(op: str):
    def lower(cx: GraphBuilder, node, a, b):
        t = cx.result(node)
        common = cx.common_dtype(a, b)
        return cx.pointwise(op, [a, b], t.shape, t.dtype, operand_dtype=common)
    lower.__name__ = f"lower_{op}"
    return lower


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    register(f"aten.{_op}.Tensor", f"aten.{_op}.Scalar")(_compare(_op))


def _logical(op: str):
    def lower(cx: GraphBuilder, node, a, b):
        t = cx.result(node)
        return cx.pointwise(op, [a, b], t.shape, t.dtype, operand_dtype="bool")
    return lower


for _op in ("logical_and", "logical_or", "logical_xor"):
    LOWERINGS[f"aten.{_op}.default"] = _logical(_op)


@register("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def lower_where(cx, node, cond, a, b):
    t = cx.result(node)
    c = cx.operand(cond, t.shape, "bool")
    return cx.emit("where", [c, cx.operand(a, t.shape, t.dtype), cx.operand(b, t.shape, t.dtype)],
                   t.shape, t.dtype)


@register("aten.clamp.default", "aten.clamp.Tensor")
def lower_clamp(cx, node, x, min=None, max=None):
    t = cx.result(node)
    y = cx.operand(x, t.shape, t.dtype)
    if min is not None:
        y = cx.emit("maximum", [y, cx.operand(min, t.shape, t.dtype)], t.shape, t.dtype)
    if max is not None:
        y = cx.emit("minimum", [y, cx.operand(max, t.shape, t.dtype)], t.shape, t.dtype)
    if min is None and max is None:
        y = cx.emit("identity", [y], t.shape, t.dtype)
    return y


@register("aten.clamp_min.default", "aten.clamp_min.Tensor")
def lower_clamp_min(cx, node, x, m):
    return lower_clamp(cx, node, x, min=m)


@register("aten.clamp_max.default", "aten.clamp_max.Tensor")
def lower_clamp_max(cx, node, x, m):
    return lower_clamp(cx, node, x, max=m)


@register("aten.hardtanh.default")
def lower_hardtanh(cx, node, x, min_val=-1.0, max_val=1.0):
    return lower_clamp(cx, node, x, min=min_val, max=max_val)


# ------------------------------------------------------------ casts, copies, aliases


@register("aten._to_copy.default", "prims.convert_element_type.default", "aten.clone.default",
          "aten.to.dtype", "aten.type_as.default", "aten.contiguous.default")
def lower_copy(cx, node, x, *args, **kwargs):
    t = cx.result(node)
    if tuple(cx.shape(x)) != tuple(t.shape):
        raise NoLowering("copy changes the shape")
    if cx.dtype(x) == t.dtype:
        return cx.emit("identity", [x], t.shape, t.dtype)
    return cx.emit("cast", [x], t.shape, t.dtype)


@register("aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default",
          "aten.lift_fresh.default", "aten.view_as.default")
def lower_alias(cx, node, x, *args, **kwargs):
    t = cx.result(node)
    if tuple(cx.shape(x)) != tuple(t.shape) or cx.dtype(x) != t.dtype:
        return cx.reshape(cx.cast(x, t.dtype), t.shape)
    return x


@register("aten._assert_tensor_metadata.default")
def lower_assert_tensor_metadata(cx, node, x, size=None, stride=None, dtype=None, **kwargs):
    """torch.export's check before `Tensor.to` that the tensor has the dtype it was traced with.
    A graph's types are static, so the check is settled here and lowers to nothing."""
    if dtype is not None and cx.dtype(x) != ir_dtype(dtype):
        raise CaptureError(f"{cx.where(node)}: the graph asserts dtype {dtype} for a {cx.dtype(x)} tensor")
    return None


# ------------------------------------------------------------ creation


def _fill(value_of):
    def lower(cx: GraphBuilder, node, *args, **kwargs):
        t = cx.result(node)
        return cx.full(value_of(args, kwargs), t.shape, t.dtype)
    return lower


LOWERINGS["aten.full.default"] = _fill(lambda a, k: a[1] if len(a) > 1 else k["fill_value"])
LOWERINGS["aten.full_like.default"] = _fill(lambda a, k: a[1] if len(a) > 1 else k["fill_value"])
LOWERINGS["aten.new_full.default"] = _fill(lambda a, k: a[2] if len(a) > 2 else k["fill_value"])
LOWERINGS["aten.scalar_tensor.default"] = _fill(lambda a, k: a[0])
for _n in ("aten.zeros_like.default", "aten.zeros.default", "aten.new_zeros.default",
           "aten.empty_like.default", "aten.empty.memory_format", "aten.new_empty.default",
           "aten.empty_strided.default", "aten.new_empty_strided.default"):
    LOWERINGS[_n] = _fill(lambda a, k: 0)  # empty: any value is correct; 0 is deterministic
for _n in ("aten.ones_like.default", "aten.ones.default", "aten.new_ones.default"):
    LOWERINGS[_n] = _fill(lambda a, k: 1)


@register("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def lower_arange(cx, node, *args, **kwargs):
    t = cx.result(node)
    name = op_name(node.target)
    if name == "aten.arange.default":
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if name == "aten.arange.start_step" and len(args) > 2 else kwargs.get("step", 1)
    if isinstance(start, sympy.Expr) and not start.is_Number:  # a size expression (Autoformer's
        # lags from a symbolic length): an iota from 0, plus the start the runtime evaluates
        ramp = cx.emit("iota", [], t.shape, t.dtype, dim=0, start=scalar_value(0, t.dtype),
                       step=scalar_value(step, t.dtype))
        return cx.emit("add", [ramp, cx.full(start, t.shape, t.dtype)], t.shape, t.dtype)
    return cx.emit("iota", [], t.shape, t.dtype, dim=0, start=scalar_value(start, t.dtype),
                   step=scalar_value(step, t.dtype))
