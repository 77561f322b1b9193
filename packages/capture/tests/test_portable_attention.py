"""A copy of a portable attention call's output (`.contiguous()` after a transpose) runs as the
library call `aten.contiguous` (portable_attention.py): a no-op where the kernel SDPA picks at run
time lays its output out so that the view is contiguous already, one copy where it does not."""

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
