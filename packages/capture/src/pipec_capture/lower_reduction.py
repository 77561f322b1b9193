"""Lowerings of reductions and the ops built from them (mean, var, softmax, layer norm)."""

from __future__ import annotations

import sympy

from pipec_ir import Ref
from pipec_ir.ops import reduction_of
from pipec_ir.symbolic import numel

from .builder import GraphBuilder, wrap_dim
from .dtypes import acc_dtype
from .table import LOWERINGS, register


def reduce(cx: GraphBuilder, op: str, x: Ref, dims, keepdim: bool, dtype: str | None = None) -> Ref:
    """One IR reduction over normalized dims: the input cast to the result's dtype (`dtype`, or
    the input's) where the op keeps its input's dtype, to bool for `any` (pipec_ir.ops.Reduction)."""
    shape = cx.shape(x)
    dims = cx.dims(dims, len(shape))
    meaning = reduction_of(op)
    if meaning.result_dtype is None:
        x = cx.cast(x, dtype or cx.dtype(x))
        out_dtype = cx.dtype(x)
    elif not meaning.indexed:  # a result of its own dtype computed from the input taken as it
        x = cx.cast(x, meaning.result_dtype)
        out_dtype = meaning.result_dtype
    else:
        out_dtype = meaning.result_dtype
    if len(shape) == 0:  # a 0-dim tensor: reducing it is the identity (an index: 0)
        return cx.emit("identity", [x], (), out_dtype) if not meaning.indexed \
            else cx.full(0, (), out_dtype)
    out_shape = tuple(sympy.Integer(1) if i in dims else s for i, s in enumerate(shape)) if keepdim \
        else tuple(s for i, s in enumerate(shape) if i not in dims)
    return cx.emit(op, [x], out_shape, out_dtype, dims=dims, keepdim=bool(keepdim))


def expand_back(cx, r: Ref, full_shape, dims, keepdim: bool) -> Ref:
    """A reduced value broadcast back to the full (unreduced) shape."""
    if not keepdim:
        kd = tuple(sympy.Integer(1) if i in dims else s for i, s in enumerate(full_shape))
        r = cx.reshape(r, kd)
    return cx.broadcast(r, full_shape)


def count(cx, shape, dims):
    return numel([shape[d] for d in dims if d < len(shape)])  # a 0-dim tensor reduces over one element


def _scalar_int(v):
    """A correction (int, float or size expression) as a sympy number/expression."""
    if isinstance(v, sympy.Expr):
        return v
    if isinstance(v, float) and v.is_integer():
        return sympy.Integer(int(v))
    return sympy.sympify(v)


@register("aten.sum.dim_IntList", "aten.sum.default")
def lower_sum(cx, node, x, dim=None, keepdim=False, *, dtype=None):
    t = cx.result(node)
    return reduce(cx, "sum", x, dim, keepdim, t.dtype)


@register("aten.prod.dim_int", "aten.prod.default")
def lower_prod(cx, node, x, dim=None, keepdim=False, *, dtype=None):
    t = cx.result(node)
    return reduce(cx, "prod", x, dim, keepdim, t.dtype)


@register("aten.amax.default", "aten.max.default")
def lower_amax(cx, node, x, dim=None, keepdim=False):
    return reduce(cx, "max", x, dim, keepdim)


@register("aten.amin.default", "aten.min.default")
def lower_amin(cx, node, x, dim=None, keepdim=False):
    return reduce(cx, "min", x, dim, keepdim)


@register("aten.max.dim")
def lower_max_dim(cx, node, x, dim, keepdim=False):
    return reduce(cx, "max", x, [dim], keepdim), reduce(cx, "argmax", x, [dim], keepdim)


@register("aten.min.dim")
def lower_min_dim(cx, node, x, dim, keepdim=False):
    return reduce(cx, "min", x, [dim], keepdim), reduce(cx, "argmin", x, [dim], keepdim)


def _arg(op: str):
    def lower(cx: GraphBuilder, node, x, dim=None, keepdim=False):
        t = cx.result(node)
        if dim is None:
            flat = cx.reshape(x, (numel(cx.shape(x)),))
            r = reduce(cx, op, flat, [0], False)
            return cx.reshape(r, t.shape)
        return reduce(cx, op, x, [dim], keepdim)
    return lower


LOWERINGS["aten.argmax.default"] = _arg("argmax")
LOWERINGS["aten.argmin.default"] = _arg("argmin")


@register("aten.any.dim", "aten.any.dims", "aten.any.default")
def lower_any(cx, node, x, dim=None, keepdim=False):
    return reduce(cx, "any", x, dim, keepdim)


@register("aten.all.dim", "aten.all.dims", "aten.all.default")
def lower_all(cx, node, x, dim=None, keepdim=False):
    # all(x) = not any(not x)
    t = cx.result(node)
    nx = cx.emit("logical_not", [cx.cast(x, "bool")], cx.shape(x), "bool")
    r = reduce(cx, "any", nx, dim, keepdim)
    return cx.emit("logical_not", [r], t.shape, "bool")


@register("aten.mean.dim", "aten.mean.default")
def lower_mean(cx, node, x, dim=None, keepdim=False, *, dtype=None):
    t = cx.result(node)
    shape = cx.shape(x)
    dims = cx.dims(dim, len(shape))
    acc = acc_dtype(t.dtype)
    n = count(cx, shape, dims)  # a size expression when a reduced dim is symbolic: a Size `full`
    s = reduce(cx, "sum", x, dims, keepdim, acc)
    m = cx.pointwise("div", [s, n], cx.shape(s), acc)
    return cx.cast(m, t.dtype)


def _variance(cx, x, dims, correction, keepdim, with_centered=False):
    """(var, mean) in the accumulation dtype; mean kept with keepdim (+ x - mean if asked)."""
    shape = cx.shape(x)
    dims = cx.dims(dims, len(shape))
    acc = acc_dtype(cx.dtype(x))
    xa = cx.cast(x, acc)
    n = count(cx, shape, dims)  # a size expression when a reduced dim is symbolic: a Size `full`
    s = reduce(cx, "sum", xa, dims, True, acc)
    mean = cx.pointwise("div", [s, n], cx.shape(s), acc)
    d = cx.emit("sub", [xa, cx.broadcast(mean, shape)], shape, acc)
    sq = cx.emit("mul", [d, d], shape, acc)
    ss = reduce(cx, "sum", sq, dims, keepdim, acc)
    corr = 1 if correction is None else correction
    var = cx.pointwise("div", [ss, sympy.Max(n - _scalar_int(corr), 0)], cx.shape(ss), acc)
    if not keepdim:
        mean = cx.reshape(mean, cx.shape(var))
    return (var, mean, d) if with_centered else (var, mean)


@register("aten.var.correction")
def lower_var(cx, node, x, dim=None, *, correction=None, keepdim=False):
    t = cx.result(node)
    var, _ = _variance(cx, x, dim, correction, keepdim)
    return cx.cast(var, t.dtype)


@register("aten.var_mean.correction")
def lower_var_mean(cx, node, x, dim=None, *, correction=None, keepdim=False):
    tv, tm = cx.result(node, 0), cx.result(node, 1)
    var, mean = _variance(cx, x, dim, correction, keepdim)
    return cx.cast(var, tv.dtype), cx.cast(mean, tm.dtype)


def _softmax_parts(cx, x, dim, half_to_float):
    t = cx.result()
    shape = cx.shape(x)
    dim = wrap_dim(dim, len(shape))
    acc = acc_dtype(t.dtype)
    xa = cx.cast(x, acc)
    m = reduce(cx, "max", xa, [dim], True)
    shifted = cx.emit("sub", [xa, cx.broadcast(m, shape)], shape, acc)
    e = cx.emit("exp", [shifted], shape, acc)
    s = reduce(cx, "sum", e, [dim], True)
    return t, shape, acc, shifted, e, s


@register("aten._softmax.default")
def lower_softmax(cx, node, x, dim, half_to_float=False):
    t, shape, acc, _, e, s = _softmax_parts(cx, x, dim, half_to_float)
    out = cx.emit("div", [e, cx.broadcast(s, shape)], shape, acc)
    return cx.cast(out, t.dtype)


@register("aten._log_softmax.default")
def lower_log_softmax(cx, node, x, dim, half_to_float=False):
    t, shape, acc, shifted, _, s = _softmax_parts(cx, x, dim, half_to_float)
    ls = cx.emit("log", [s], cx.shape(s), acc)
    out = cx.emit("sub", [shifted, cx.broadcast(ls, shape)], shape, acc)
    return cx.cast(out, t.dtype)


@register("aten.native_layer_norm.default")
def lower_native_layer_norm(cx, node, x, normalized_shape, weight, bias, eps):
    t_out, t_mean, t_rstd = cx.result(node, 0), cx.result(node, 1), cx.result(node, 2)
    shape = cx.shape(x)
    k = len(normalized_shape)
    dims = tuple(range(len(shape) - k, len(shape)))
    acc = acc_dtype(t_out.dtype)
    var, mean, d = _variance(cx, x, dims, 0, True, with_centered=True)
    ve = cx.pointwise("add", [var, float(eps)], cx.shape(var), acc)
    rstd = cx.emit("rsqrt", [ve], cx.shape(var), acc)
    y = cx.emit("mul", [d, cx.broadcast(rstd, shape)], shape, acc)
    if weight is not None:
        y = cx.emit("mul", [y, cx.operand(weight, shape, acc)], shape, acc)
    if bias is not None:
        y = cx.emit("add", [y, cx.operand(bias, shape, acc)], shape, acc)
    out = cx.cast(y, t_out.dtype)
    return out, cx.reshape(cx.cast(mean, t_mean.dtype), t_mean.shape), \
        cx.reshape(cx.cast(rstd, t_rstd.dtype), t_rstd.shape)
