"""Gathers moved below the pointwise math they read: `gather(f(a, b), d, i)` -> `f(gather(a, d, i), b)`.

A gather reads its source from memory (fusion: "a take's source must come from memory"), so
a pointwise value it reads is written out whole first. A vocabulary loss is the case that
matters: nll_loss gathers one log-probability per row from `x - max - log(sum(exp(x - max)))`,
which made pipec write the fp32 log-probabilities (4096 x 30522 for BERT's masked-LM loss: 500
MB) to read 4096 of them. Gathering `x` instead and computing the rest at the gathered points
leaves the row kernel with its two statistics alone.

The rewrite is an FX pass over the ATen graph, run before lowering. It goes through pointwise
ops (ELEMENTWISE) whose tensor operands either have the source's full shape (gathered in turn)
or are constant along the gathered dim and match the index elsewhere (a row statistic of shape
[N, 1]: read as it is). Any other operand stops it, and the gather stays where it was. Values
on the way are recomputed at the gathered points only; a gather that reads more than a quarter
of its source is left alone where those values have other readers (recomputing them would
cost more than storing them).
"""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .fx_edit import call_node, meta_val, recompiled_if, replace_node

aten = torch.ops.aten

# pointwise ops a gather may move below (each computes out[p] from its operands at p)
ELEMENTWISE = frozenset({
    aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.neg.default,
    aten.exp.default, aten.log.default, aten.where.self, aten._to_copy.default,
})
MAX_DEPTH = 8  # how many pointwise ops deep a gather moves
SHARED_FRACTION = 4  # a gather reading > 1/4 of its source keeps shared values stored


def sink_gathers(gm: torch.fx.GraphModule) -> int:
    """Rewrite every gather of `gm` that can move below the pointwise math it reads; returns
    how many moved."""
    moved = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is aten.gather.default and _movable(node):
            source, dim, index = node.args[0], node.args[1], node.args[2]
            with gm.graph.inserting_before(node):
                new = _gathered(gm.graph, source, dim, index, 0)
            replace_node(gm.graph, node, new)
            moved += 1
    return recompiled_if(gm, moved)





def _same(a, b) -> bool:
    return statically_known_true(a == b)


def _movable(gather: torch.fx.Node) -> bool:
    if gather.kwargs.get("sparse_grad") or len(gather.args) != 3:
        return False
    source, dim, index = gather.args
    src, idx = meta_val(source), meta_val(index)
    if not isinstance(src, torch.Tensor) or not isinstance(idx, torch.Tensor) or src.dim() != idx.dim() or src.dim() == 0:
        return False
    dim = dim % src.dim()
    # the index spans the source in every other dim: row statistics then line up with it
    if not all(_same(idx.shape[d], src.shape[d]) for d in range(src.dim()) if d != dim):
        return False
    if not _chain_ok(source, src.shape, dim, 0):
        return False
    small = statically_known_true(idx.numel() * SHARED_FRACTION <= src.numel())
    return small or _single_reader_chain(source, 0)


def _is_elementwise(node) -> bool:
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target not in ELEMENTWISE:
        return False
    if node.target is aten._to_copy.default:  # a dtype change only, on the same device and layout
        return set(node.kwargs) <= {"dtype"}
    return True


def _statistic(operand, shape, dim: int) -> bool:
    """An operand constant along `dim` that lines up with the index elsewhere (shape [N, 1]), or
    a scalar tensor."""
    val = meta_val(operand)
    if not isinstance(val, torch.Tensor):
        return False
    if val.dim() == 0:
        return True
    if val.dim() != len(shape):
        return False
    return _same(val.shape[dim], 1) and all(_same(val.shape[d], shape[d]) for d in range(len(shape)) if d != dim)


def _full_shape(operand, shape) -> bool:
    val = meta_val(operand)
    return isinstance(val, torch.Tensor) and val.dim() == len(shape) and all(
        _same(a, b) for a, b in zip(val.shape, shape))


def _chain_ok(node, shape, dim: int, depth: int) -> bool:
    """`node` is pointwise math the gather can move below, at least one op deep."""
    if depth >= MAX_DEPTH or not _is_elementwise(node):
        return False
    for a in node.args:
        if not isinstance(a, torch.fx.Node):
            continue
        if _full_shape(a, shape):
            continue  # gathered (and, if pointwise, moved below in turn)
        if not _statistic(a, shape, dim):
            return False
    return True


def _single_reader_chain(node, depth: int) -> bool:
    if not _is_elementwise(node) or depth >= MAX_DEPTH:
        return True
    return len(node.users) == 1 and all(
        _single_reader_chain(a, depth + 1) for a in node.args if isinstance(a, torch.fx.Node))


def _gathered(graph: torch.fx.Graph, node, dim: int, index, depth: int):
    """A node computing gather(node, dim, index)."""
    shape = meta_val(node).shape
    if not (_is_elementwise(node) and _chain_ok(node, shape, dim % len(shape), depth)):
        return call_node(graph, aten.gather.default, (node, dim, index), {})
    args = tuple(_gathered(graph, a, dim, index, depth + 1) if _full_shape(a, shape) else a
                 for a in node.args)
    return call_node(graph, node.target, args, dict(node.kwargs))
