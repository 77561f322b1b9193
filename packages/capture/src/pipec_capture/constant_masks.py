"""Attention masks that depend on no input, folded into SDPA's arguments.

Under torch.export, transformers builds masks it skips under Dynamo: ViT and wav2vec2 pass
an all-true mask (`arange(17) + 0 >= 0`, expanded), GPT-2 and Llama without a padding mask a
causal one built from `arange` comparisons. Such a mask is a constant of the sizes, but as an
argument it is one more tensor per attention call, an additive mask inside the fused kernel,
and on the GPU it keeps SDPA off its flash kernels. A mask computed from no graph input is
evaluated once here (its nodes are pure ATen ops, run as traced):

* every position allowed (all true, or an additive mask of zeros): the mask is dropped;
* exactly SDPA's causal pattern (`ones(L, S).tril()` in every batch and head, the masked
  positions false or at most the dtype's lowest value): the mask is dropped and `is_causal`
  set, which is what Dynamo's graph of the same model says.

Any other mask stays as it is (and a mask built from an input, a padding mask, is never
evaluated).
"""

from __future__ import annotations

import torch

_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_ATEN = torch.ops.aten

# pure, deterministic ops a mask is made of: creation, comparisons, logic, arithmetic, layout
_PURE = frozenset({
    "arange", "full", "ones", "zeros", "scalar_tensor", "full_like", "ones_like", "zeros_like", "empty_like",
    "ge", "gt", "le", "lt", "eq", "ne", "logical_and", "logical_or", "logical_not", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_not", "bitwise_xor", "__and__", "__or__", "__invert__",
    "add", "sub", "mul", "div", "neg", "where", "masked_fill", "any", "all", "to", "_to_copy", "clone",
    "alias", "lift_fresh_copy", "unsqueeze", "squeeze", "expand", "view", "reshape", "_unsafe_view",
    "slice", "select", "permute", "transpose", "t", "contiguous", "index_select", "tril", "triu",
})
MAX_MASK_ELEMENTS = 1 << 28  # a sanity bound: expanded views count their full size here


def fold_constant_masks(gm: torch.fx.GraphModule) -> int:
    """Drop the attention masks of `gm` that allow every position or are exactly causal
    (module docstring); returns how many SDPA calls changed."""
    changed = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not _SDPA:
            continue
        args = list(node.args) + [None] * (6 - len(node.args))
        kwargs = dict(node.kwargs)
        mask = args[3] if len(node.args) > 3 else kwargs.get("attn_mask")
        causal = args[5] if len(node.args) > 5 else kwargs.get("is_causal", False)
        if not isinstance(mask, torch.fx.Node) or causal:
            continue
        value = _evaluate(mask)
        if value is None:
            continue
        q, k = node.args[0].meta.get("val"), node.args[1].meta.get("val")
        kind = _mask_kind(value, q, k)
        if kind is None:
            continue
        if len(node.args) > 3:
            args[3] = None
        kwargs.pop("attn_mask", None)
        if kind == "causal":
            if len(node.args) > 5:
                args[5] = True
            else:
                kwargs["is_causal"] = True
        node.args = tuple(args[:max(len(node.args), 4)])
        node.kwargs = kwargs
        changed += 1
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed


def _evaluate(mask: torch.fx.Node) -> torch.Tensor | None:
    """The mask's value when every node it depends on is a pure op on constants, else None."""
    order, seen, stack = [], set(), [mask]
    while stack:  # the nodes it depends on
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op != "call_function" or not _pure(n.target):
            return None
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor) and val.numel() > MAX_MASK_ELEMENTS:
            return None
        order.append(n)
        stack.extend(n.all_input_nodes)
    values: dict[torch.fx.Node, object] = {}
    try:
        for n in sorted(order, key=_position(mask.graph)):
            args = torch.fx.node.map_arg(n.args, values.__getitem__)
            kwargs = torch.fx.node.map_arg(n.kwargs, values.__getitem__)
            values[n] = n.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a mask that cannot be evaluated here is left as traced
        return None
    out = values[mask]
    return out if isinstance(out, torch.Tensor) else None


def _position(graph):
    index = {n: i for i, n in enumerate(graph.nodes)}
    return index.__getitem__


def _pure(target) -> bool:
    packet = getattr(target, "overloadpacket", None)
    return packet is not None and getattr(target, "namespace", None) == "aten" and packet.__name__ in _PURE


def _mask_kind(mask: torch.Tensor, q, k) -> str | None:
    """"all" (every position allowed), "causal" (SDPA's is_causal pattern) or None."""
    if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor) or q.dim() < 2:
        return None
    length, source = q.shape[-2], k.shape[-2]
    if not (isinstance(length, int) and isinstance(source, int)):
        return None
    try:
        full = mask.expand(*torch.broadcast_shapes(mask.shape, (*q.shape[:-2], length, source)))
    except RuntimeError:
        return None
    if full.shape[-2:] != (length, source):
        return None
    if mask.dtype == torch.bool:
        allowed = full
    elif mask.is_floating_point():
        lowest = torch.finfo(mask.dtype).min
        if not bool(((full == 0) | (full <= lowest)).all()):
            return None  # a bias with other values: not a mask
        allowed = full == 0
    else:
        return None
    if bool(allowed.all()):
        return "all"
    causal = torch.ones(length, source, dtype=torch.bool, device=mask.device).tril()
    if bool((allowed == causal).all()):
        return "causal"
    return None


__all__ = ["MAX_MASK_ELEMENTS", "fold_constant_masks"]
