"""Copies of a portable attention call's output, made only where the output needs one.

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
"""

from __future__ import annotations

import torch

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
