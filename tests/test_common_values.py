"""Values a model makes again for each layer's library call are made once (fusion's
common_values.py): each attention layer's additive mask, made from one boolean mask, and each
layer's clone of one position bias for its matmul. Results match eager (CPU: Triton's
interpreter; on a GPU, the GPU). Training graphs come without such repeats: AOTAutograd's
partitioner already merges them in the joint graph."""

import pytest
import torch
import torch.nn.functional as F

import pipec
import pipec_fusion.engine

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def dropped(monkeypatch):
    """{dropped node: its replacement}, over every graph fusion planned in this test."""
    seen = {}
    original = pipec_fusion.engine.merge_common_values

    def watched(graph):
        out, dropped_here = original(graph)
        seen.update(dropped_here)
        return out, dropped_here

    monkeypatch.setattr(pipec_fusion.engine, "merge_common_values", watched)
    return seen


class MaskedLayers(torch.nn.Module):
    """Three attention layers over one boolean mask (SDPA converts it for each call, as in
    transformers' encoders), then a product with one position bias cloned per layer (T5)."""

    def __init__(self, width: int = 16, heads: int = 2, layers: int = 3):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(width, 3 * width) for _ in range(layers))
        self.bias = torch.nn.Parameter(torch.randn(width, width) / 4)

    def forward(self, x, mask):
        b, t, w = x.shape
        for qkv in self.qkv:
            q, k, v = qkv(x).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
            x = x + attn.transpose(1, 2).reshape(b, t, w)
            x = x @ self.bias.t().contiguous()
        return x


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(2, 8, 16, device=DEVICE)
    mask = torch.ones(2, 8, dtype=torch.bool, device=DEVICE)
    mask[1, 5:] = False
    return x, mask


def test_repeated_masks_and_clones_are_made_once_and_match_eager(dropped):
    model = MaskedLayers().to(DEVICE).eval()
    x, mask = _inputs()
    with torch.no_grad():
        got = pipec.compile(model, cache="none")(x, mask)
        want = model(x, mask)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert len(set(dropped.values())) >= 1 and len(dropped) >= 2  # later layers read the first's
