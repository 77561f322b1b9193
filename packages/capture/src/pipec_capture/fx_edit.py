"""Small edits of ATen fx graphs that capture's rewrite passes share (sink_gathers.py,
follow_layouts.py, fold_gelu.py, attention_layouts.py): a new call with its fake value, a node
replaced, and the dead code dropped after a pass."""

from __future__ import annotations

import torch


def replace_node(graph: torch.fx.Graph, node: torch.fx.Node, new: torch.fx.Node) -> None:
    """Every use of `node` reads `new` instead, and `node` goes (what only it read is dead now:
    `recompiled_if` drops it)."""
    node.replace_all_uses_with(new)
    graph.erase_node(node)


def recompiled_if(gm: torch.fx.GraphModule, rewritten: int) -> int:
    """After a pass's `rewritten` rewrites of `gm`: drop dead nodes and recompile, when there were
    any; returns `rewritten`."""
    if rewritten:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return rewritten


def meta_val(node):
    """The fake tensor (or value) the trace recorded for `node`; None for a non-node."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def call_node(graph: torch.fx.Graph, target, args, kwargs):
    """A new call of `target` with its meta value computed on the graph's fake tensors."""
    new = graph.call_function(target, args, kwargs)
    fake = next(v for v in (meta_val(a) for a in args) if isinstance(v, torch.Tensor))
    mode = getattr(fake, "fake_mode", None)
    vals = [meta_val(a) if isinstance(a, torch.fx.Node) else a for a in args]
    if mode is not None:
        with mode:
            new.meta["val"] = target(*vals, **kwargs)
    else:
        new.meta["val"] = target(*vals, **kwargs)
    return new
