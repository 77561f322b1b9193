"""Attention masks computed from no input are folded into SDPA's arguments under torch.export
(attention.py's `drop_constant_masks`, the rule Dynamo graphs already had): dropped when they
allow every position, `is_causal` when exactly causal; masks from inputs, constant masks of any
other pattern and biases that are not masks stay."""

import pytest
import torch

from pipec_capture.attention import drop_constant_masks
from pipec_capture.export import export_program

F = torch.nn.functional


class Attention(torch.nn.Module):
    """q, k, v of [2, 2, 6, 8] with a mask of kind `kind` built inside forward, as transformers does."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def forward(self, q, k, v, pad):
        i = torch.arange(q.shape[-2])
        if self.kind == "all":  # ViT's under export: arange + 0 >= 0, expanded
            mask = ((i + 0) >= 0)[None, None, None, :].expand(q.shape[0], -1, q.shape[-2], -1)
        elif self.kind == "causal":  # a decoder's, from position comparisons
            mask = (i[None, :] <= i[:, None])[None, None]
        elif self.kind == "causal_additive":
            mask = torch.zeros(6, 6).masked_fill(i[None, :] > i[:, None], torch.finfo(torch.float32).min)
        elif self.kind == "bias":  # 0 on and below the diagonal, but a bias above it: not a mask
            mask = torch.zeros(6, 6).masked_fill(i[None, :] > i[:, None], 0.5)
        elif self.kind == "sliding":  # constant, but not causal: a window of 2
            mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < 2)
        else:  # from the input: a padding mask
            mask = pad[:, None, None, :].bool()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _sdpa(gm):
    (node,) = [n for n in gm.graph.nodes if n.target is torch.ops.aten.scaled_dot_product_attention.default]
    return node


@pytest.mark.parametrize("kind, masked, causal", [
    ("all", False, False), ("causal", False, True), ("causal_additive", False, True),
    ("bias", True, False), ("sliding", True, False), ("padding", True, False)])
def test_a_constant_mask_folds_into_the_call(kind, masked, causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8, generator=g) for _ in range(3))
    pad = torch.ones(2, 6, dtype=torch.long)
    pad[1, 4:] = 0
    model = Attention(kind)
    ep = export_program(model, (q, k, v, pad))
    changed = drop_constant_masks(ep.graph_module)
    node = _sdpa(ep.graph_module)
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    assert (mask is not None) == masked and changed == (0 if masked else 1)
    assert bool(node.kwargs.get("is_causal", node.args[5] if len(node.args) > 5 else False)) == causal
    torch.testing.assert_close(ep.graph_module(q, k, v, pad)[0], model(q, k, v, pad))
