"""Lowerings of views (reshape, permute, expand, slice, select, split, repeat): no data moves."""

from __future__ import annotations

import sys

import sympy
import torch

from pipec_ir import size_attr
from pipec_ir.symbolic import FloorDiv

from .builder import wrap_dim
from .table import NoLowering, op_name, register


@register("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
          "aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.unsqueeze.default",
          "aten.flatten.using_ints", "aten.unflatten.int")
def lower_reshape(cx, node, x, *args, **kwargs):
    t = cx.result(node)
    if tuple(cx.shape(x)) == tuple(t.shape):
        return x
    return cx.emit("reshape", [x], t.shape, t.dtype)


@register("aten.permute.default")
def lower_permute(cx, node, x, dims):
    t = cx.result(node)
    rank = cx.type(x).rank
    dims = tuple(wrap_dim(d, rank) for d in dims)
    if dims == tuple(range(rank)):
        return x
    return cx.emit("permute", [x], t.shape, t.dtype, dims=dims)


@register("aten.t.default", "aten.numpy_T.default")
def lower_t(cx, node, x):
    rank = cx.type(x).rank
    if rank < 2:
        return x
    return lower_permute(cx, node, x, tuple(reversed(range(rank))))


@register("aten.transpose.int")
def lower_transpose(cx, node, x, d0, d1):
    rank = cx.type(x).rank
    if rank == 0:
        return x
    dims = list(range(rank))
    a, b = wrap_dim(d0, rank), wrap_dim(d1, rank)
    dims[a], dims[b] = dims[b], dims[a]
    return lower_permute(cx, node, x, dims)


@register("aten.expand.default", "aten.expand_as.default", "aten.broadcast_to.default")
def lower_expand(cx, node, x, *args, **kwargs):
    return cx.broadcast(x, cx.result(node).shape)


def _static_index(cx, v, what):
    if isinstance(v, sympy.Expr):
        if not v.is_Integer:
            raise NoLowering(f"symbolic {what} {v}")
        return int(v)
    return int(v)


def _index_expr(v) -> sympy.Expr:
    return v if isinstance(v, sympy.Expr) else sympy.Integer(int(v))


def _wrap_index(index: sympy.Expr, size: sympy.Expr, what: str) -> sympy.Expr:
    """A possibly negative (static) index into a dim of `size` -> a non-negative expression.

    A symbolic index is taken as non-negative (Dynamo guards what the trace assumed);
    a negative static one on a symbolic dim counts from its end (`s1 - 3`)."""
    if index.is_Integer and int(index) < 0:
        index = size + index if what == "select index" else sympy.Max(size + index, 0)
    if index.is_Integer and size.is_Integer:
        return sympy.Integer(min(max(int(index), 0), int(size)))
    if index.is_Integer:
        return sympy.Integer(max(int(index), 0))
    if not index.is_integer:
        raise NoLowering(f"{what} {index} is not an integer expression")
    return index


def _slice_bound(index, size: sympy.Expr, default: sympy.Expr) -> sympy.Expr:
    """Python's clamp of a slice start or end into [0, size] (a symbolic index is taken as
    non-negative, as `_wrap_index` takes it)."""
    if index is None:
        return default
    index = _index_expr(index)
    if index.is_Integer and int(index) >= sys.maxsize:
        return size
    if index.is_Integer and int(index) < 0:
        return sympy.Max(size + index, 0)
    return sympy.Min(index, size)


def define_slice_length(cx, node, dim: int, step: int) -> None:
    """Define the unbacked length and storage offset torch's fake slice may give its output
    (torch 2.11, tracing size-obliviously, gives `x[:, -3:]` on a dynamic dim the length u0 and
    the offset u1, where torch 2.13 writes Max(...) expressions). Neither is data-dependent: the
    length is Python's slice length of the input's size, the offset the input's plus the
    clamped start times the dim's stride, so both are defined from the slice's arguments before
    its result type is read."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return

    def unbacked(value, path) -> list:
        """The symbols naming `value` (the result type's, after the shape env's replacements:
        AOTAutograd's retrace binds fresh ones its shape env maps to Dynamo's) and those the
        node binds at `path`; none when it is not unbacked."""
        if not isinstance(value, torch.SymInt) or not free_unbacked_symbols(value):
            return []
        syms = [sympy.sympify(value.node.shape_env.replace(value.node.expr))]
        return syms + [sym for sym, keys in (node.meta.get("unbacked_bindings") or {}).items()
                       if [getattr(k, "name", getattr(k, "idx", None)) for k in keys] == path]

    length_syms = unbacked(val.shape[dim], ["size", dim])
    offset_syms = unbacked(val.storage_offset(), ["storage_offset"])
    if not length_syms and not offset_syms:
        return

    def torch_side(v):  # kept over torch's symbols: a backward graph converts them too
        v = v.meta.get("val") if isinstance(v, torch.fx.Node) else v
        return sympy.sympify(v.node.expr) if isinstance(v, torch.SymInt) else sympy.sympify(v)

    args = node.args  # aten.slice.Tensor(self, dim=0, start=None, end=None, step=1)
    start = node.kwargs.get("start", args[2] if len(args) > 2 else None)
    end = node.kwargs.get("end", args[3] if len(args) > 3 else None)
    source = node.args[0].meta["val"]
    whole = torch_side(source.shape[dim])
    first = _slice_bound(torch_side(start) if start is not None else None, whole, sympy.Integer(0))
    length = sympy.Max(_slice_bound(torch_side(end) if end is not None else None, whole, whole) - first, 0)
    length = length if step == 1 else FloorDiv(length + step - 1, step)
    offset = torch_side(source.storage_offset()) + first * torch_side(source.stride()[dim])
    shape_env = (val.shape[dim] if length_syms else val.storage_offset()).node.shape_env
    for syms, definition in ((length_syms, length), (offset_syms, offset)):
        for sym in syms:
            if sym.is_Symbol:
                cx.symbols.define(sym, definition, shape_env)


@register("aten.slice.Tensor")
def lower_slice(cx, node, x, dim=0, start=None, end=None, step=1):
    shape = cx.shape(x)
    dim = wrap_dim(dim, len(shape))
    size = shape[dim]
    step = _static_index(cx, step, "slice step")
    define_slice_length(cx, node, dim, step)
    t = cx.result(node)
    start = _wrap_index(sympy.Integer(0) if start is None else _index_expr(start), size, "slice start")
    if tuple(t.shape) == tuple(shape) and start == 0:
        return x
    return cx.emit("slice", [x], t.shape, t.dtype, dim=dim, start=size_attr(start), step=step)


@register("aten.select.int")
def lower_select(cx, node, x, dim, index):
    t = cx.result(node)
    shape = cx.shape(x)
    dim = wrap_dim(dim, len(shape))
    index = _wrap_index(_index_expr(index), shape[dim], "select index")
    return cx.emit("select", [x], t.shape, t.dtype, dim=dim, index=size_attr(index))


@register("aten.split.Tensor", "aten.split_with_sizes.default", "aten.unbind.int")
def lower_split(cx, node, x, arg=None, dim=0):
    vals = node.meta["val"]
    shape = cx.shape(x)
    name = op_name(node.target)
    if name == "aten.unbind.int":
        dim = wrap_dim(arg if arg is not None else 0, len(shape))
        return tuple(cx.emit("select", [x], cx.tensor_type(v).shape, cx.dtype(x), dim=dim, index=i)
                     for i, v in enumerate(vals))
    dim = wrap_dim(dim, len(shape))
    out, start = [], sympy.Integer(0)
    for v in vals:
        vt = cx.tensor_type(v)
        if tuple(vt.shape) == tuple(shape):
            out.append(x)
        else:
            out.append(cx.emit("slice", [x], vt.shape, vt.dtype, dim=dim, start=size_attr(start), step=1))
        start = start + vt.shape[dim]
    return tuple(out)



@register("aten.repeat.default")
def lower_repeat(cx, node, x, repeats):
    """repeat = reshape (interleave size-1 dims) + expand + reshape: views only."""
    t = cx.result(node)
    reps = [cx.symbols.size(r) if not isinstance(r, sympy.Expr) else r for r in repeats]
    src = list(cx.shape(x))
    src = [sympy.Integer(1)] * (len(reps) - len(src)) + src
    inter = []
    wide = []
    for r, s in zip(reps, src):
        inter += [sympy.Integer(1), s]
        wide += [r, s]
    y = cx.reshape(x, inter)
    y = cx.broadcast(y, wide)
    return cx.reshape(y, t.shape)
