"""A classifier whose classes are not a multiple of 8, trained with cross entropy, computed over
padded rows (a Dynamo-graph rewrite, before AOTAutograd).

BERT's vocabulary has 30522 words and GPT-2's 50257: a bf16 row of logits is then not 16-byte
aligned, so cuBLAS takes its slow kernels or pads copies of its operands, and the row kernels of
the loss read and write misaligned rows. On the H200 the loss of BERT's masked-LM head (4096 rows)
took 2.55 ms a training step at 30522 words and 1.41 at 30528 (docs/performance.md, "Session 10").
Inductor pads its buffers' row strides; pipec's buffers are contiguous, so this pass pads the
problem instead: for

    logits = linear(x, W, b)  [-> float() / to(dtype) / contiguous() / view(-1, V)]  -> cross_entropy

it computes `linear(x, pad(W, P rows of 0), pad(b, P entries of -inf))` and runs the same chain
and loss over V + P columns. exp(-inf) is 0, so each row's max, log-sum-exp, loss and gradient
are those of the real columns, and the padded columns' gradient is exactly 0 (the loss's one-hot
never points there). W and b take their gradients through the pads. Whoever else reads the
logits (the model's output) gets `padded[..., :V].contiguous()`, eager's layout.

The head and its loss must be in one Dynamo graph. transformers' GPT-2 warns once from its
loss property (`logger.warning_once`), a graph break under plain torch.compile; under
`pipec.compile` that call is a no-op while Dynamo traces (cli trace_settings.py), so its
50257-word head is padded; through `torch.compile(backend="pipec")` it is not.

Only where that is exact: cross_entropy over class indices (not probabilities) of [N, C] (or [C])
scores, without class weights or label smoothing (each would read the padded columns), floating
point, V >= MIN_CLASSES, and a chain whose steps keep the class dim last.
"""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F

from .fx_edit import example_value, trace_examples

PAD_TO = 8  # classes: rows of 16 bytes in bf16 (cuBLAS's alignment)
MIN_CLASSES = 1024  # a smaller head is not worth a padded copy of its weight
_CHAIN_METHODS = frozenset({"float", "contiguous", "to", "view", "reshape"})


def pad_class_dims(gm: torch.fx.GraphModule) -> int:
    """Rewrite every such classifier + cross_entropy of `gm` in place; how many were padded."""
    padded = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is F.cross_entropy and _pad_one(gm.graph, node):
            padded += 1
    if padded:
        gm.graph.lint()
        gm.recompile()
    return padded


def _arg(node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)



def _pad_one(graph: torch.fx.Graph, loss: torch.fx.Node) -> bool:
    if _arg(loss, 2, "weight") is not None or _arg(loss, 7, "label_smoothing", 0.0) not in (0, 0.0):
        return False
    target = example_value(_arg(loss, 1, "target"))  # class indices; probabilities would read every class
    if not isinstance(target, torch.Tensor) or target.dtype.is_floating_point:
        return False
    chain, logits = [], _arg(loss, 0, "input")
    while isinstance(logits, torch.fx.Node) and logits.op == "call_method" and logits.target in _CHAIN_METHODS:
        if len(logits.users) != 1:
            return False
        chain.append(logits)
        logits = logits.args[0]
    linear = logits
    if not (isinstance(linear, torch.fx.Node) and linear.op == "call_function" and linear.target is F.linear):
        return False
    weight, bias = _arg(linear, 1, "weight"), _arg(linear, 2, "bias")
    w = example_value(weight)
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.dtype.is_floating_point:
        return False
    classes = w.shape[0]
    if not isinstance(classes, int) or classes < MIN_CLASSES or classes % PAD_TO == 0:
        return False
    pad = -classes % PAD_TO
    if not all(_keeps_class_dim(step, classes) for step in chain):
        return False
    scores = example_value(_arg(loss, 0, "input"))  # classes are cross_entropy's dim 1: only [N, C] (or [C]) has them last
    if not isinstance(scores, torch.Tensor) or scores.dim() not in (1, 2) or scores.shape[-1] != classes:
        return False
    others = [u for u in linear.users if u not in chain]
    new = []  # the nodes added, for their example values
    with graph.inserting_before(linear):
        if bias is None:
            bias = graph.call_method("new_zeros", (weight, (classes,)))
            new.append(bias)
        padded_weight = graph.call_function(F.pad, (weight, (0, 0, 0, pad)))
        padded_bias = graph.call_function(F.pad, (bias, (0, pad)), {"value": float("-inf")})
        padded = graph.call_function(F.linear, (_arg(linear, 0, "input"), padded_weight, padded_bias))
    new += [padded_weight, padded_bias, padded]
    for step in chain:  # the class dim grows by `pad` along the chain
        if step.target in ("view", "reshape"):
            step.args = (step.args[0], *_shape_args(step)[:-1], classes + pad)
    (chain[-1] if chain else loss).replace_input_with(linear, padded)
    if others:
        with graph.inserting_after(padded):
            real = graph.call_function(operator.getitem, (padded, (Ellipsis, slice(None, classes))))
        with graph.inserting_after(real):
            dense = graph.call_method("contiguous", (real,))
        for user in others:
            user.replace_input_with(linear, dense)
        new += [real, dense]
    graph.erase_node(linear)
    trace_examples(graph, new + chain, getattr(w, "fake_mode", None))
    return True


def _shape_args(step: torch.fx.Node) -> tuple:
    """view/reshape's sizes, whether passed as one tuple or one by one."""
    sizes = step.args[1:]
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        return tuple(sizes[0])
    return tuple(sizes)


def _keeps_class_dim(step: torch.fx.Node, classes: int) -> bool:
    """A chain step that leaves the classes as the last dim, whole: a cast, contiguous(), or a
    view/reshape whose last size is the class count."""
    if step.target in ("float", "contiguous"):
        return len(step.args) == 1 and not step.kwargs
    if step.target == "to":
        dtype = step.args[1] if len(step.args) > 1 else step.kwargs.get("dtype")
        return isinstance(dtype, torch.dtype) and dtype.is_floating_point and len(step.args) <= 2
    sizes = _shape_args(step)
    return bool(sizes) and sizes[-1] == classes and not step.kwargs


__all__ = ["MIN_CLASSES", "PAD_TO", "pad_class_dims"]
