"""Portable attention calls of an exported graph: their output copied only where it needs a
copy, and a boolean mask made additive once for all of them.

torch.export keeps `F.scaled_dot_product_attention` as one portable op, which picks its kernel
when it runs (what an artifact should do: it may run on another GPU). The trace computes the
op's result with the math kernel's layout, contiguous [b, h, s, d], so a model's
`out.transpose(1, 2).contiguous()` (or `.reshape(b, s, h * d)`) after it is traced as a copy.
On the GPU the call runs cuDNN's or flash's kernel, whose output is [b, s, h, d] in memory: the
transposed output is contiguous already, and `pipec.compile`, which traces the chosen kernel,
records no copy there.

The copy lowered to a Triton kernel reading the library result through the transpose, which
assumed the result row-major as traced: the runtime made it so (one copy), then the kernel copied
again. A real-size ViT-base artifact (bf16, H200) made one launch per layer more than compile
and ran 8% slower.

Here each such copy, a `clone` to the contiguous format of a view of a portable attention
result, is marked to run as `aten.contiguous`, a library call: a no-op where the view is
contiguous when it runs, one copy where it is not (the math kernel, on the CPU).

A boolean mask is made additive on every call: the portable op first computes
`where(mask, 0, -inf)` in the query's dtype (one elementwise kernel and two fills per call).
transformers passes one padding mask to every layer, so BERT base's artifact made 36 more
launches per call than `pipec.compile` (whose capture passes the chosen kernel its bias, made
once) and ran 5% slower on the H200. `additive_attention_masks` makes that bias once per mask
and dtype in the graph, where it fuses into a Triton kernel, and hands it to every call: the
values each call sees are the ones it would have made itself.
"""

from __future__ import annotations

import torch

from .fx_edit import call_node, meta_val

aten = torch.ops.aten

# node.meta key: lower this clone as the library call `aten.contiguous.default`
LIBRARY_COPY = "pipec_library_copy"

PORTABLE_ATTENTION = aten.scaled_dot_product_attention.default


def mark_attention_output_copies(gm: torch.fx.GraphModule) -> int:
    """Mark every contiguous-format clone of a view of a portable attention result in `gm`
    (LIBRARY_COPY); returns how many were marked."""
    marked = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.clone.default:
            continue
        if node.kwargs.get("memory_format") is not torch.contiguous_format:
            continue  # preserve_format keeps the source's layout: not a layout change
        if _attention_root(node.args[0]):
            node.meta[LIBRARY_COPY] = True
            marked += 1
    return marked


def _attention_root(node) -> bool:
    """Is `node` a portable attention call's output, through view ops only?"""
    while isinstance(node, torch.fx.Node) and node.op == "call_function":
        if node.target is PORTABLE_ATTENTION:
            return True
        if not (isinstance(node.target, torch._ops.OpOverload) and node.target.is_view):
            return False
        node = node.args[0]
    return False


def additive_attention_masks(gm: torch.fx.GraphModule) -> int:
    """Give each portable attention call of `gm` with a boolean mask the additive mask torch would
    make of it, made once per (mask, query dtype); returns how many calls were rewritten."""
    graph = gm.graph
    biases: dict[tuple, torch.fx.Node] = {}
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not PORTABLE_ATTENTION:
            continue
        position = 3 if len(node.args) > 3 else "attn_mask"
        mask = node.args[3] if position == 3 else node.kwargs.get("attn_mask")
        mask_val, query_val = meta_val(mask), meta_val(node.args[0])
        if mask_val is None or mask_val.dtype != torch.bool or query_val is None:
            continue
        key = (mask, query_val.dtype)
        if key not in biases:
            biases[key] = _additive(graph, mask, query_val.dtype)
        if position == 3:
            node.update_arg(3, biases[key])
        else:
            node.update_kwarg("attn_mask", biases[key])
        rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


def _additive(graph: torch.fx.Graph, mask: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
    """`where(mask, 0, -inf)` in `dtype`, right after `mask`: what the portable op computes from
    a boolean mask before it runs any kernel."""
    with graph.inserting_after(mask):
        bias = call_node(graph, aten.where.Scalar, (mask, 0.0, float("-inf")), {})
    if meta_val(bias).dtype == dtype:
        return bias
    with graph.inserting_after(bias):
        return call_node(graph, aten._to_copy.default, (bias,), {"dtype": dtype})
