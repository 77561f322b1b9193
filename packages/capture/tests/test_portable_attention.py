"""A copy of a portable attention call's output (`.contiguous()` after a transpose) runs as the
library call `aten.contiguous` (portable_attention.py): a no-op where the kernel SDPA picks at run
time lays its output out so that the view is contiguous already, one copy where it does not. A
boolean mask read by several calls is made additive once, with the values each call would make."""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from pipec_capture.export import export_graph

F = torch.nn.functional


class Heads(torch.nn.Module):
    """Attention over [b, h, s, d], its output transposed back to [b, s, h * d]: `contiguous`
    (ViT, BERT) or a plain reshape (which copies a non-viewable input)."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how

    def forward(self, q, k, v):
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2)
        if self.how == "contiguous":
            out = out.contiguous()
        return out.reshape(out.shape[0], out.shape[1], -1) * 2


def _inputs():
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))


@pytest.mark.parametrize("how", ["contiguous", "reshape"])
def test_copy_after_portable_attention_is_a_library_call(how):
    # the math kernel while exporting: its output is [b, h, s, d] in memory, as a GPU trace records
    # it, so the transpose needs a copy in the trace (on the CPU torch's own kernel would need none)
    with sdpa_kernel([SDPBackend.MATH]):
        graph, _ = export_graph(Heads(how), _inputs())
    targets = [n.attr("target") for n in graph.nodes if n.op == "extern"]
    assert "aten.contiguous.default" in targets, targets
    assert not any(n.op == "identity" for n in graph.nodes)  # no Triton copy of the attention output


def test_copy_of_other_values_stays_a_kernel():
    class Other(torch.nn.Module):
        def forward(self, x):
            return (x * 2).transpose(1, 2).contiguous() + 1

    graph, _ = export_graph(Other(), (torch.randn(2, 3, 4),))
    assert not any(n.attr("target") == "aten.contiguous.default" for n in graph.nodes if n.op == "extern")


class SharedMask(torch.nn.Module):
    """Two attention layers reading one boolean padding mask, as transformers' encoders do."""

    def forward(self, q, k, v, mask):
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(a, k, v, mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_boolean_mask_is_made_additive_once_for_every_call(dtype):
    from pipec_capture.portable_attention import PORTABLE_ATTENTION, additive_attention_masks

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g).to(dtype) for _ in range(3))
    mask = torch.rand(2, 1, 5, 5, generator=g) > 0.4
    mask[..., 0] = True
    mask[1, 0, 2] = False  # a query that sees no key: the portable op's own handling of it decides
    gm = torch.export.export(SharedMask(), (q, k, v, mask)).graph_module
    want = gm(q, k, v, mask)
    assert additive_attention_masks(gm) == 2
    aten = torch.ops.aten
    assert sum(n.target is aten.where.Scalar for n in gm.graph.nodes) == 1
    calls = [n for n in gm.graph.nodes if n.target is PORTABLE_ATTENTION]
    masks = {(n.args[3] if len(n.args) > 3 else n.kwargs["attn_mask"]) for n in calls}
    assert len(masks) == 1 and next(iter(masks)).meta["val"].dtype == dtype
    torch.testing.assert_close(gm(q, k, v, mask), want, equal_nan=True, rtol=0, atol=0)
    assert additive_attention_masks(gm) == 0  # an additive mask is left as it is
