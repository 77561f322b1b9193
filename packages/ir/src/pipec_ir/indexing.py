"""View ops as index arithmetic.

`view_source_index(node, index)` maps a multi-index into a view node's output to
the multi-index into its input. Fusion (legality) and codegen (loads) share it,
so both agree on what a view reads.
"""

from __future__ import annotations

import sympy

from .symbolic import FloorDiv, ModularIndexing, contiguous_strides
from .types import Node, TensorType, attr_expr


def view_source_index(node: Node, index: tuple, source: TensorType) -> tuple:
    handler = _VIEW_INDEX[node.op]
    return tuple(handler(node, tuple(index), source))


def _reshape(node, index, source):
    out_shape, in_shape = node.type.shape, source.shape
    if tuple(out_shape) == tuple(in_shape):
        return index
    groups = _reshape_groups(in_shape, out_shape)
    if groups is None:  # unmatched symbolic sizes: go through the flat index
        flat = sum((i * s for i, s in zip(index, contiguous_strides(out_shape))), sympy.Integer(0))
        return _unflatten(flat, in_shape)
    result = []
    for in_dims, out_dims in groups:
        if not in_dims:
            continue
        if not out_dims:
            result.extend(sympy.Integer(0) for _ in in_dims)
            continue
        sub_out = [out_shape[d] for d in out_dims]
        flat = sum((index[d] * s for d, s in zip(out_dims, contiguous_strides(sub_out))), sympy.Integer(0))
        result.extend(_unflatten(flat, [in_shape[d] for d in in_dims]))
    return result


def _unflatten(flat, shape):
    strides = contiguous_strides(shape)
    out = []
    for k, (size, stride) in enumerate(zip(shape, strides)):
        term = FloorDiv(flat, stride)
        out.append(term if k == 0 else ModularIndexing(term, size))
    return out


def _reshape_groups(in_shape, out_shape):
    """Pair runs of input dims with runs of output dims of equal product.

    Returns [(in_dims, out_dims), ...] or None when symbolic sizes do not line up
    (the caller then goes through the flat index). Size-1 dims may form groups
    with an empty other side: their index is always 0.
    """
    groups, i, o = [], 0, 0
    n_in, n_out = len(in_shape), len(out_shape)
    while i < n_in or o < n_out:
        if i < n_in and in_shape[i] == 1 and (o >= n_out or out_shape[o] != 1):
            groups.append(([i], []))
            i += 1
            continue
        if o < n_out and out_shape[o] == 1 and (i >= n_in or in_shape[i] != 1):
            groups.append(([], [o]))
            o += 1
            continue
        if i >= n_in or o >= n_out:
            return None
        gi, go = [i], [o]
        pi, po = in_shape[i], out_shape[o]
        i, o = i + 1, o + 1
        while sympy.expand(pi - po) != 0:
            if not (pi.is_Integer and po.is_Integer):
                return None
            if int(pi) < int(po) and i < n_in:
                gi.append(i)
                pi = pi * in_shape[i]
                i += 1
            elif int(po) < int(pi) and o < n_out:
                go.append(o)
                po = po * out_shape[o]
                o += 1
            else:
                return None
        groups.append((gi, go))
    return groups


def _permute(node, index, source):
    dims = node.attr("dims")
    result = [sympy.Integer(0)] * len(dims)
    for out_pos, in_dim in enumerate(dims):
        result[in_dim] = index[out_pos]
    return result


def _expand(node, index, source):
    offset = len(node.type.shape) - len(source.shape)
    return [sympy.Integer(0) if size == 1 and node.type.shape[k + offset] != 1 else index[k + offset]
            for k, size in enumerate(source.shape)]


def _slice(node, index, source):
    dim, start, step = node.attr("dim"), attr_expr(node.attr("start")), node.attr("step")
    out = list(index)
    out[dim] = start + step * index[dim]
    return out


def _select(node, index, source):
    dim, at = node.attr("dim"), node.attr("index")
    return list(index[:dim]) + [attr_expr(at)] + list(index[dim:])


_VIEW_INDEX = {"reshape": _reshape, "permute": _permute, "expand": _expand, "slice": _slice, "select": _select}


# ---------------------------------------------------------------- contiguous reshapes
# (a matmul epilogue over [B, T, N] reads a product computed as [B*T, N]: fusion checks it,
# codegen indexes it)

def refine_shapes(a, b) -> tuple | None:
    """The coarsest shape both `a` and `b` are row-major reshapes of by merging adjacent dims
    ([32, 3072] and [2, 16, 3072] -> [2, 16, 3072]); size-1 dims dropped. None when there is
    none: a reshape that is not a split/merge of dims ([6, 4] and [4, 6]) or another numel."""
    a = [sympy.sympify(s) for s in a if s != 1]
    b = [sympy.sympify(s) for s in b if s != 1]
    out = []
    while a and b:
        x, y = a[0], b[0]
        if sympy.expand(x - y) == 0:
            out.append(x)
            a, b = a[1:], b[1:]
            continue
        for big, small, rest in ((x, y, a), (y, x, b)):
            q = sympy.cancel(big / small)
            if q.is_polynomial() and sympy.fraction(q)[1] == 1 and (not q.is_Number or q.is_Integer):
                out.append(small)
                rest[0] = q  # the rest of the bigger dim stays to be matched
                (b if rest is a else a).pop(0)
                break
        else:
            return None
    return tuple(out) if not a and not b else None


def coarse_index(index: tuple, refined, shape) -> tuple | None:
    """The index into `shape` of the point `index` of `refined` (a refinement of `shape`):
    each dim of `shape` is the row-major combination of the refined dims it merges."""
    out, k = [], 0
    for size in shape:
        if size == 1:
            out.append(sympy.Integer(0))
            continue
        expr, prod = sympy.Integer(0), sympy.Integer(1)
        while sympy.expand(prod - size) != 0:
            if k >= len(refined):
                return None
            expr, prod = expr * refined[k] + index[k], prod * refined[k]
            k += 1
        out.append(sympy.expand(expr))
    while k < len(refined) and refined[k] == 1:  # trailing size-1 dims (a plain domain keeps them): index 0
        k += 1
    return tuple(out) if k == len(refined) else None
