"""A CUDA convolution's bias as a pointwise add: `convolution(x, w, b)` -> `convolution(x, w) + b`.

ATen's cuDNN path convolves, then adds the bias in a kernel of its own: one more launch and one
more pass over the output per conv. ConvNeXt-tiny ran 19 such adds, 204 us of its 2.5 ms under
CUDA Graphs on the H200 (suite run 15's kernel profile), where Inductor, which splits the bias
off as here, has none: its bias add rides in the next Triton kernel (the block's layer norm).
Split off, the add is an ordinary pointwise op that fusion puts in the consumer's kernel, and
follow_layouts.py (run after this pass) keeps it over the conv's channels-last storage.

Only on CUDA: on the CPU, oneDNN adds the bias inside the convolution itself.
"""

from __future__ import annotations

import torch

from .fx_edit import call_node, meta_val, recompiled_if, replace_node

aten = torch.ops.aten

SPLIT_ON = ("cuda",)  # devices whose convolution adds its bias in a separate kernel


def split_conv_bias(gm: torch.fx.GraphModule, devices: tuple[str, ...] | None = None) -> int:
    """Rewrite every `aten.convolution` of `gm` with a bias, on `devices` (default `SPLIT_ON`), as
    the convolution without it plus a broadcast add; returns how many."""
    devices = SPLIT_ON if devices is None else devices
    split = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if not _splittable(node, devices):
            continue
        x, weight, bias, *rest = node.args
        out = meta_val(node)
        # [C] -> [1, C, 1, ...]: the output's channel dim, broadcast over batch and space
        shape = [1, -1] + [1] * (out.dim() - 2)
        with graph.inserting_before(node):
            conv = call_node(graph, aten.convolution.default, (x, weight, None, *rest), {})
            column = call_node(graph, aten.view.default, (bias, shape), {})
            added = call_node(graph, aten.add.Tensor, (conv, column), {})
        replace_node(graph, node, added, keep_meta=True)
        split += 1
    return recompiled_if(gm, split)


def _splittable(node, devices: tuple[str, ...]) -> bool:
    if node.op != "call_function" or node.target is not aten.convolution.default or len(node.args) != 9:
        return False
    x, bias, out = meta_val(node.args[0]), meta_val(node.args[2]), meta_val(node)
    return (isinstance(bias, torch.Tensor) and isinstance(out, torch.Tensor) and isinstance(x, torch.Tensor)
            and out.device.type in devices and bias.dim() == 1 and out.dim() >= 3
            and bias.dtype == out.dtype)
