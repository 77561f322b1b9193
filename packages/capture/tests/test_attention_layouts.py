"""Attention's computed operands are stored as the trace laid them out (attention_layouts.py):
a rotary-embedded query over heads transposed from [b, s, h, d] is written [b, s, h, d], so
attention's output is too, and the reshape after it stays a view."""

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from pipec_capture import core_decompositions, lower_graph
from pipec_capture.attention_layouts import follow_attention_layouts
from pipec_capture.reference import run_graph

B, S, H, D = 2, 8, 2, 16


def rotary_attention(x, cos, sin):
    q = x.view(B, S, H, D).transpose(1, 2)
    q = q * cos + torch.cat((-q[..., D // 2:], q[..., :D // 2]), -1) * sin  # eager keeps [b, s, h, d]
    out = F.scaled_dot_product_attention(q, q, q)
    return out.transpose(1, 2).reshape(B, S, H * D)


def view_attention(x, cos, sin):  # the query a view of an input: nothing computes it, nothing to store
    q = x.view(B, S, H, D).transpose(1, 2)
    return F.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(B, S, H * D) * cos.sum() * sin.sum()


def contiguous_attention(x, cos, sin):  # row-major already: left alone
    q = x.view(B, H, S, D) * 2
    return F.scaled_dot_product_attention(q, q, q).sum(0) + cos + sin


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(B, S, H * D, generator=g), torch.randn(1, 1, S, D, generator=g), torch.randn(1, 1, S, D, generator=g)


def _trace(fn):
    return make_fx(fn, decomposition_table=core_decompositions())(*_inputs())


def _attention_query(gm):
    node = next(n for n in gm.graph.nodes if n.op == "call_function" and "scaled_dot_product" in str(n.target))
    return node.args[0]


def test_a_computed_query_is_stored_in_the_traced_order():
    gm = _trace(rotary_attention)
    assert follow_attention_layouts(gm) == 1
    query = _attention_query(gm)
    assert query.target is torch.ops.aten.permute.default  # a view of the stored tensor
    stored = query.args[0]
    assert stored.target is torch.ops.aten.clone.default
    assert tuple(stored.meta["val"].shape) == (B, S, H, D)
    torch.testing.assert_close(gm(*_inputs()), rotary_attention(*_inputs()))


def test_lowered_graph_matches_eager():
    graph = lower_graph(_trace(rotary_attention), name="t")
    (out,) = run_graph(graph, list(_inputs()))
    torch.testing.assert_close(out, rotary_attention(*_inputs()))


def test_views_and_row_major_operands_are_left_alone():
    assert follow_attention_layouts(_trace(view_attention)) == 0
    assert follow_attention_layouts(_trace(contiguous_attention)) == 0
