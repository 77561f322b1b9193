"""Attention's operands stored in the layout the trace recorded for them, as eager stores them.

cuDNN's attention lays its output out as its query is laid out. In a transformers decoder the
query is `q_proj(x).view(b, s, h, d).transpose(1, 2)` with the rotary embedding applied: eager's
elementwise ops keep their operand's layout, so the query, and then attention's output, are
[b, s, h, d] in memory. `out.transpose(1, 2).reshape(b, s, h * d)` before the output projection
is then a view, and the trace records no copy.

pipec's kernels write their results row-major in the logical shape, so the rotary kernel wrote
the query [b, h, s, d], cuDNN's output came out the same, and the reshape ATen ran for the graph's
view had to copy: one `aten::clone` per layer (Qwen2-0.5B on the H200: 24 copies and 24 extra
launches a call, in a model bound by launches).

Here each query, key and value of an attention call that a pointwise op computes, and that the
trace made with permuted strides, is written in that order: `permute(clone(permute(x, order)),
inverse)`. The clone is the kernel's store in the permuted order. The pointwise chain before it
fuses into the clone's kernel, which then computes the same values at the same logical indices
and stores them where eager does. Views, inputs and library results are left as they are: for
them the copy would be new work, and so would it for a value something else reads as well
(it would be stored in both orders).
"""

from __future__ import annotations

import torch

from .fx_edit import meta_val, stored_permuted

aten = torch.ops.aten

ATTENTION = frozenset(
    getattr(aten, name).default for name in (
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu")
    if hasattr(aten, name))


def follow_attention_layouts(gm: torch.fx.GraphModule) -> int:
    """Store the computed query, key and value of every attention call of `gm` in the order of
    the trace's strides; returns how many operands were rewritten."""
    rewritten = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in ATTENTION:
            continue
        for operand in dict.fromkeys(a for a in node.args[:3] if isinstance(a, torch.fx.Node)):
            order = _permuted_order(operand)
            if order is None or not _computed_pointwise(operand) or len(operand.users) != 1:
                continue  # another reader would keep the row-major store too: two stores, not one
            with graph.inserting_before(node):
                stored = stored_permuted(graph, operand, order)
            node.replace_input_with(operand, stored)
            rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


def _permuted_order(node) -> list[int] | None:
    """The dims of `node`'s value from outermost to innermost in memory, when its strides are
    those of a dense tensor in another order than row-major; None otherwise."""
    val = meta_val(node)
    if not isinstance(val, torch.Tensor) or val.dim() < 2:
        return None
    strides, shape = list(val.stride()), list(val.shape)
    if not all(type(s) is int for s in strides + shape):
        return None  # symbolic sizes: reading them would add guards, and the layout may vary
    order = sorted(range(val.dim()), key=lambda d: (-strides[d], d))
    expected = 1
    for d in reversed(order):  # dense: each dim's stride is the product of the sizes inside it
        if shape[d] != 1 and strides[d] != expected:
            return None
        expected *= shape[d]
    return order if order != list(range(val.dim())) else None


def _computed_pointwise(node) -> bool:
    """A pointwise op's result: pipec writes it from a kernel, whose store order is free."""
    target = node.target if node.op == "call_function" else None
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags
