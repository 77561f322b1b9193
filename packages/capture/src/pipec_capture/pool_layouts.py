"""A max pool over a channels-last input pools its NHWC storage: `max_pool2d(x')` ->
`permute(pipec.max_pool2d_nhwc(x), TO_NCHW)`, where `x'` is the NCHW view of NHWC `x`
(follow_layouts.py calls `rewrite` for each node, in graph order).

ResNet's stem pools the ReLU of its first conv, which follow_layouts.py stores NHWC. The max
pool's lowering iterated over the NCHW result, so neighbouring programs read `x` 64 channels
apart: on an H100 (session 39) the pool took 256 us a call (a padded copy of `x`, 202 us, then
the window maxima, 54), against Inductor's 29 us for batch norm, ReLU and pool together,
and the conv after it needed its input copied to NHWC again. Over NHWC storage the pool reads
`x` and writes its result in storage order, and the conv reads that result as it is
(conv_layouts.drop_needless_copies).

`pipec.max_pool2d_nhwc` exists for capture only: a torch op with a schema, a shape rule and an
eager implementation (which a graph that falls back to eager runs), lowered by
lower_pool.py like `aten.max_pool2d_with_indices` with its spatial dims at 1 and 2. It is put in
a graph only where that lowering cannot fail (`_eligible`), so no IR ever calls it.
"""

from __future__ import annotations

import functools
import math
import operator

import torch

from .fx_edit import TO_NCHW, TO_NHWC, call_node, meta_val, nhwc_storage
from .lower_pool import MAX_TAPS, per_dim, reaches_padding

aten = torch.ops.aten

DEFAULTS = ((), 0, 1, False)  # max_pool2d_with_indices' stride, padding, dilation, ceil_mode
SCHEMA = ("max_pool2d_nhwc(Tensor x, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, "
          "bool ceil_mode) -> (Tensor, Tensor)")


def max_pool2d_nhwc(x, kernel_size, stride, padding, dilation, ceil_mode):
    """The values and indices of `max_pool2d_with_indices` over NHWC `x`, both NHWC."""
    values, indices = aten.max_pool2d_with_indices.default(x.permute(TO_NCHW), kernel_size, stride, padding,
                                                           dilation, ceil_mode)
    return values.permute(TO_NHWC).contiguous(), indices.permute(TO_NHWC).contiguous()


@functools.cache  # once per process; the cache keeps the library (and so the registrations) alive
def declare() -> torch.library.Library:
    library = torch.library.Library("pipec", "FRAGMENT")
    if not hasattr(torch.ops.pipec, "max_pool2d_nhwc"):
        library.define(SCHEMA)
        library.impl("max_pool2d_nhwc", max_pool2d_nhwc, "CompositeExplicitAutograd")
        torch.library.register_fake("pipec::max_pool2d_nhwc", max_pool2d_nhwc, lib=library)
    return library


def rewrite(graph: torch.fx.Graph, node: torch.fx.Node, channels_last) -> bool:
    """Pool `node`'s channels-last input over its NHWC storage (module docstring); False when
    `node` is no such pool. `channels_last(node, val)`: follow_layouts.py's test."""
    args = _eligible(node, channels_last)
    if args is None:
        return False
    declare()
    x = node.args[0]
    with graph.inserting_before(node):
        pooled = call_node(graph, torch.ops.pipec.max_pool2d_nhwc.default, (nhwc_storage(graph, x), *args), {})
        parts = []
        for i in range(2):
            part = call_node(graph, operator.getitem, (pooled, i), {})
            parts.append(call_node(graph, aten.permute.default, (part, list(TO_NCHW)), {}))
    for user in list(node.users):  # getitem(node, i) -> the permuted part i
        user.replace_all_uses_with(parts[user.args[1]])
        graph.erase_node(user)
    graph.erase_node(node)
    return True


def _eligible(node, channels_last) -> tuple | None:
    """(kernel, stride, padding, dilation, ceil_mode), the first four as int pairs, when `node` is a 2-d max pool
    with indices of a 4-d floating-point channels-last input, static spatial sizes, read only
    through getitem, and a window the lowering unrolls (dilation 1 where it reaches the padding:
    lower_pool's clamped taps); else None."""
    if node.op != "call_function" or node.target is not aten.max_pool2d_with_indices.default or node.kwargs:
        return None
    x = node.args[0]
    val = meta_val(x)
    if not isinstance(val, torch.Tensor) or val.dim() != 4 or not val.is_floating_point() or not channels_last(x, val):
        return None
    if any(not isinstance(s, int) for s in val.shape):
        return None
    if any(u.op != "call_function" or u.target is not operator.getitem or not isinstance(u.args[1], int) for u in node.users):
        return None
    kernel, *given = node.args[1:]
    stride, padding, dilation, ceil_mode = (*given, *DEFAULTS[len(given):])
    kernel = per_dim(kernel, 2, "kernel_size")
    stride = per_dim(stride, 2, "stride") if stride else kernel
    padding, dilation = per_dim(padding, 2, "padding"), per_dim(dilation, 2, "dilation")
    if math.prod(kernel) > MAX_TAPS or val.shape[0] == 0 or 0 in val.shape[2:]:
        return None
    out = meta_val(node)[0].shape[2:]
    if dilation != (1, 1) and reaches_padding(padding, out, stride, kernel, dilation, val.shape[2:]):
        return None
    return kernel, stride, padding, dilation, bool(ceil_mode)

