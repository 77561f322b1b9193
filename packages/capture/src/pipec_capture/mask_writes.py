"""`x[mask] = v` in a Dynamo graph as `x.copy_(torch.where(mask, v, x))`, before AOTAutograd.

A write through a boolean mask (`operator.setitem` with a bool tensor for its index) becomes
`aten.index_put_` with a boolean index, whose result gathers at the mask's `nonzero`: a shape
that depends on the data. Where the value requires grad, the backward gathers the gradient
there, which AOTAutograd's fake tensors cannot trace, and the whole graph ran eagerly: wav2vec2,
HuBERT and WavLM's SpecAugment in training (`hidden_states[mask_time_indices] =
self.masked_spec_embed`). Elsewhere the write was an extern call (lower_indexing.py).

When the value is the same for every element the mask selects (it has no more dims than the
ones the mask does not cover, so it broadcasts against them), the write equals choosing
between the value and `x` element by element, written back in place:

    x[mask] = v    ->    x.copy_(torch.where(mask[..., None, ...], v, x))

The values are the same (`copy_` casts to x's dtype as setitem does), the write goes to x's
memory as before (a view's base sees it), and the gradients are the same sums without the
`nonzero`: pointwise work that fuses. A value with one entry per selected element (`x[mask] =
y[mask]`), an index that is not one boolean tensor, or sizes that are not known to agree are
left as they were.
"""

from __future__ import annotations

import operator

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .fx_edit import example_value, trace_examples


def masked_writes_as_where(gm: torch.fx.GraphModule) -> int:
    """Rewrite every such masked write of `gm` in place; how many were rewritten."""
    new: list[torch.fx.Node] = []  # the nodes the rewrites add, for their example values
    rewritten = sum(_rewrite(gm.graph, node, new) for node in list(gm.graph.nodes)
                    if node.op == "call_function" and node.target is operator.setitem)
    if rewritten:
        trace_examples(gm.graph, new, getattr(example_value(new[-1].args[0]), "fake_mode", None))
        gm.graph.lint()
        gm.recompile()
    return rewritten



def _rewrite(graph: torch.fx.Graph, node: torch.fx.Node, new: list[torch.fx.Node]) -> bool:
    if len(node.args) != 3 or node.kwargs or node.users:
        return False
    x, mask, value = node.args
    xv, mv = example_value(x), example_value(mask)
    if not isinstance(xv, torch.Tensor) or not isinstance(mv, torch.Tensor) or mv.dtype is not torch.bool:
        return False
    covered = mv.dim()
    if not 1 <= covered <= xv.dim() or mv.device != xv.device:
        return False
    if not all(statically_known_true(a == b) for a, b in zip(mv.shape, xv.shape[:covered])):
        return False
    vv = example_value(value) if isinstance(value, torch.fx.Node) else value
    if isinstance(vv, torch.Tensor):
        if vv.dim() > xv.dim() - covered or (vv.device != xv.device and vv.dim() > 0):
            return False
    elif not isinstance(vv, (bool, int, float)):
        return False
    rest = xv.dim() - covered
    with graph.inserting_before(node):
        # the mask's dims, then one of size 1 for each dim it does not cover
        wide = graph.call_function(operator.getitem, (mask, (Ellipsis,) + (None,) * rest))
        chosen = graph.call_function(torch.where, (wide, value, x))
        write = graph.call_method("copy_", (x, chosen))
    graph.erase_node(node)
    new += [wide, chosen, write]
    return True


__all__ = ["masked_writes_as_where"]
