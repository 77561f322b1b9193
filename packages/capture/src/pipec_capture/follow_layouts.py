"""Pointwise results stored channels-last when their operands are: `f(a', b')` -> `f(a, b)'`,
where `x'` is the NCHW view `permute(x, [0, 3, 1, 2])` of an NHWC tensor `x`.

Eager's elementwise ops lay their result out as their operands are laid out, so a conv net
that works channels-last stays channels-last. ConvNeXt is the case that matters. Each block
computes its MLP over NHWC, permutes back to NCHW and adds the residual:
`residual + permute(gamma * mlp(x), [0, 3, 1, 2])`. In eager the sum comes out channels-last,
and the next block's depthwise 7 x 7 conv runs cuDNN's NHWC kernel.

pipec's kernels write their results row-major in the logical shape, so the sum came out NCHW.
ATen then ran its generic depthwise kernel on it: on the H200, 126 us a call against cuDNN's 40,
in 17 of ConvNeXt-tiny's 18 blocks. The conv's NCHW result was also copied to NHWC for the
LayerNorm after it. Together that made pipec 0.56x Inductor's speed on ConvNeXt (suite run 9).

Here, a pointwise op whose full-size operands are all channels-last is computed over the NHWC
tensors and permuted after. An operand counts as channels-last when it is such a permute, or
a computed tensor (not a view) the trace made with channels-last strides (a conv's result). Broadcast operands are
permuted to match, and scalars stay as they are. Later pointwise ops then see a permute in
turn, so a chain of residual adds stays NHWC from one conv to the next. The kernels compute the
same values at the same logical indices: only where they are stored changes, to what eager does.

A `cat` of channels-last parts is joined over their NHWC storage the same way (a UNet's skip
connections). Only the 4-d channels-last permutation is followed. Attention permutes its heads,
`[0, 2, 1, 3]`, and the matmuls after it want each head row-major, so those stay as they are.
Random ops are left alone as well: their values depend on the order elements are generated in.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from . import pool_layouts
from .fx_edit import TO_NCHW, TO_NHWC, call_node, is_permute, meta_val, nhwc_storage, recompiled_if, replace_node

aten = torch.ops.aten



def follow_layouts(gm: torch.fx.GraphModule) -> int:
    """Rewrite every pointwise op of `gm` whose full-size operands are all channels-last to run
    over their NHWC storage; returns how many were rewritten."""
    rewritten = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if _channels_last_cat(node):
            parts, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
            with graph.inserting_before(node):
                # each part as a view of itself, even the NCHW view of an NHWC value: a view is
                # gathered from memory (cat_parts.py), where the value's own math moved into the
                # cat's kernel would take it past the size limit (four gathers of permuted
                # conv results, each with its index arithmetic) and split it in three
                nhwc = [call_node(graph, aten.permute.default, (p, list(TO_NHWC)), {}) for p in parts]
                inner = call_node(graph, aten.cat.default, (nhwc, TO_NHWC.index(dim % 4)), {})
                outer = call_node(graph, aten.permute.default, (inner, list(TO_NCHW)), {})
            replace_node(graph, node, outer)
            rewritten += 1
            continue
        if pool_layouts.rewrite(graph, node, _channels_last):  # a max pool: over the NHWC storage
            rewritten += 1
            continue
        full = _channels_last_operands(node)
        if full is None:
            continue
        with graph.inserting_before(node):
            args = tuple(_nhwc(graph, a, full) for a in node.args)
            inner = call_node(graph, node.target, args, dict(node.kwargs))
            outer = call_node(graph, aten.permute.default, (inner, list(TO_NCHW)), {})
        replace_node(graph, node, outer)
        rewritten += 1
    return recompiled_if(gm, rewritten)


def _pointwise(node) -> bool:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    tags = node.target.tags
    if torch.Tag.nondeterministic_seeded in tags or node.target is aten.clone.default:
        return False  # random values follow generation order; a clone is asked for a layout
    if node.target is aten._to_copy.default:  # a dtype change only, on the same device and layout
        return set(node.kwargs) <= {"dtype"}
    return torch.Tag.pointwise in tags


def _same_shape(val, shape) -> bool:
    return val.dim() == len(shape) and all(statically_known_true(a == b) for a, b in zip(val.shape, shape))


def _channels_last_operands(node) -> set[int] | None:
    """The ids of the full-size operands of pointwise `node` when every one of them is
    channels-last; else None."""
    if not _pointwise(node) or any(isinstance(v, torch.fx.Node) for v in node.kwargs.values()):
        return None
    val = meta_val(node)
    if not isinstance(val, torch.Tensor) or val.dim() != 4:
        return None
    full: set[int] = set()
    for a in node.args:
        operand = meta_val(a)
        if not isinstance(operand, torch.Tensor):
            if isinstance(a, torch.fx.Node):
                return None  # an operand the trace has no tensor for
            continue
        if operand.dim() > 4:
            return None
        if not _same_shape(operand, val.shape):
            continue  # broadcast: permuted to match (or a scalar)
        if not _channels_last(a, operand):
            return None
        full.add(id(a))
    return full or None


def _channels_last_cat(node) -> bool:
    """A 4-d `cat` whose parts are all channels-last (a UNet's skip connection, joined to the
    upsampled features along the channels): joined over their NHWC storage, along the matching
    dim, it stays channels-last for the conv after it, and its kernel reads and writes in the same
    order (row-major, it read every part across its channels: 40-65 us a call on SD 1.5's
    decoder, docs/performance.md "Session 36")."""
    if node.op != "call_function" or node.target is not aten.cat.default or node.kwargs:
        return False
    parts = node.args[0]
    val = meta_val(node)
    if not isinstance(val, torch.Tensor) or val.dim() != 4 or not isinstance(parts, (list, tuple)) or not parts:
        return False
    for p in parts:
        operand = meta_val(p) if isinstance(p, torch.fx.Node) else None
        if not isinstance(operand, torch.Tensor) or operand.dim() != 4 or not _channels_last(p, operand):
            return False
    return True


def _channels_last(node, val: torch.Tensor) -> bool:
    """Is `node` (whose tensor is `val`) channels-last: the NCHW view of NHWC storage, or a
    computed tensor the trace made with channels-last strides?"""
    return _is_nchw_view(node) or (_library_result(node) and _channels_last_strides(val))


def _is_nchw_view(node) -> bool:
    return is_permute(node, TO_NCHW)


def _library_result(node) -> bool:
    """A computed tensor (a conv's result), not a view: a view with channels-last strides is some
    other layout that happens to match (T5's position bias, `permute(bias, [2, 0, 1])[None]`,
    read by every layer as [1, heads, q, k] and best stored that way)."""
    target = node.target if node.op == "call_function" else None
    return isinstance(target, torch._ops.OpOverload) and not target.is_view


def _channels_last_strides(val: torch.Tensor) -> bool:
    """Made with channels-last strides by the trace (not merely compatible with them)."""
    try:
        return bool(not val.is_contiguous() and val.is_contiguous(memory_format=torch.channels_last))
    except Exception:  # noqa: BLE001 - a layout decided by unbacked sizes: not followed
        return False


def _nhwc(graph: torch.fx.Graph, a, full: set):
    """Operand `a` of the rewritten op, over NHWC storage."""
    if not isinstance(a, torch.fx.Node):
        return a
    if id(a) in full:
        return nhwc_storage(graph, a)
    val = meta_val(a)
    if val.dim() == 0:
        return a
    for _ in range(4 - val.dim()):  # broadcast from the left, as the op did, then permute
        a = call_node(graph, aten.unsqueeze.default, (a, 0), {})
    return call_node(graph, aten.permute.default, (a, list(TO_NHWC)), {})
