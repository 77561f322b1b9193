"""Lowerings of the functional forms of in-place ops that functionalization leaves behind.

AOTAutograd functionalizes every graph: `dst.copy_(src)` on a graph intermediate (as in
the decompositions of circular padding, batch norm or matrix_power) becomes
`aten.copy(dst, src)`, a new tensor with dst's shape and dtype holding src's values
(broadcast to dst's shape, cast to dst's dtype). dst's values are never read.
"""

from __future__ import annotations

from pipec_ir import Ref

from .table import NoLowering, register


@register("aten.copy.default")
def lower_functional_copy(cx, node, dst, src, non_blocking=False):
    t = cx.result(node)
    if not isinstance(src, Ref):
        raise NoLowering("copy from a non-tensor source")
    if len(cx.shape(src)) > len(t.shape):
        raise NoLowering("copy from a source of higher rank")
    # cast first, then broadcast: an expand is a view, so the cast runs once per source element
    out = cx.broadcast(cx.cast(src, t.dtype), t.shape)
    # the result is a new tensor: never hand back src itself (an output must not alias an input)
    return out if out.name != src.name else cx.emit("identity", [src], t.shape, t.dtype)
