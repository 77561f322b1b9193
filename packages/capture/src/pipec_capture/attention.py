"""Attention with a mask keeps a fused kernel on the GPU.

`F.scaled_dot_product_attention` picks its kernel when it runs. Under AOTAutograd it runs on
fake tensors, and there torch's choice for a masked call on CUDA is the math path (a real
tensor of the same layout gets cuDNN): two batched products and a softmax, in fp32 for half
types. transformers builds a mask under tracing even when eager would pass none (BERT, ViT...),
so every attention of such a model became fp32 GEMMs (BERT base 8 x 512 bf16 on the H200:
2.2 ms of 4.9 for the attention's products alone, in Inductor as in pipec).

`choose_attention_kernels` rewrites each such call of the Dynamo graph, before AOTAutograd
traces it, to `masked_attention`: on CUDA, for layouts the memory-efficient kernel takes, the
mask becomes the additive bias torch itself would make of it (-inf where a boolean mask is
false) and the call is `aten._scaled_dot_product_efficient_attention`, which the capture stage
keeps as one library call (its backward too). Anything else is the call as it was.
"""

from __future__ import annotations

import torch

# Layouts aten's memory-efficient attention takes: 4-D q/k/v [batch, heads, seq, dim] with
# contiguous last dims, one head dim for q, k and v, a multiple of 8 up to 128 (its fast range)
EFFICIENT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 128
# the efficient kernel reads the bias rows aligned to this many elements (torch pads them too)
BIAS_ALIGNMENT = 16


def efficient_attention_applies(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa) -> bool:
    if attn_mask is None or dropout_p != 0.0 or enable_gqa or is_causal:
        # torch's own choice is a fused kernel already, it must sample dropout, or the call is
        # one torch refuses (a mask and is_causal): its own error then
        return False
    tensors = (q, k, v)
    if not all(isinstance(t, torch.Tensor) and t.is_cuda and t.dim() == 4 for t in tensors):
        return False
    if not isinstance(attn_mask, torch.Tensor) or attn_mask.dim() > 4 or not attn_mask.is_cuda:
        return False
    if q.dtype not in EFFICIENT_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    if attn_mask.dtype != torch.bool and attn_mask.dtype != q.dtype:
        return False
    head = q.shape[-1]
    if not (k.shape[-1] == head and v.shape[-1] == head and head % 8 == 0 and head <= MAX_HEAD_DIM):
        return False
    if q.shape[0] != k.shape[0] or q.shape[1] != k.shape[1] or k.shape[:3] != v.shape[:3]:
        return False
    target = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    mask_shape = (1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)
    if any(m != 1 and m != t for m, t in zip(mask_shape, target)):
        return False
    return all(t.stride(-1) == 1 for t in tensors)


def attention_bias(attn_mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The mask as the additive bias [batch, heads, q_len, k_len] the efficient kernel reads:
    contiguous rows, padded to BIAS_ALIGNMENT and sliced back, as torch's own call prepares it."""
    if attn_mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        bias = torch.where(attn_mask, zero, torch.full((), float("-inf"), dtype=q.dtype, device=q.device))
    else:
        bias = attn_mask
    while bias.dim() < 4:
        bias = bias.unsqueeze(0)
    # rows contiguous (a mask expanded along its last dim has stride 0 there); a dim of size 1
    # (the heads, usually) stays broadcast by the expand below
    bias = bias.contiguous()
    length = k.shape[2]
    if length % BIAS_ALIGNMENT:
        pad = BIAS_ALIGNMENT - length % BIAS_ALIGNMENT
        bias = torch.nn.functional.pad(bias, (0, pad))[..., :length]
    return bias.expand(q.shape[0], q.shape[1], q.shape[2], length)


def masked_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                     enable_gqa=False):
    """F.scaled_dot_product_attention, with a masked CUDA call sent to the efficient kernel."""
    if not efficient_attention_applies(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        extra = {"enable_gqa": True} if enable_gqa else {}
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **extra)
    bias = attention_bias(attn_mask, query, key)
    needs_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    out = torch.ops.aten._scaled_dot_product_efficient_attention.default(
        query, key, value, bias, needs_lse, 0.0, False, scale=scale)
    return out[0]


_SDPA_TARGETS = (torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention)


def choose_attention_kernels(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Send every scaled_dot_product_attention call of a Dynamo graph through masked_attention
    (which decides per call, when AOTAutograd traces it). Returns `gm`, changed in place."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _SDPA_TARGETS:
            node.target = masked_attention
            changed = True
    if changed:
        gm.recompile()
    return gm
