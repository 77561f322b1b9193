"""Lowerings of torch's functional collectives to pipec's `collective` ops (docs/IR.md, "Collectives").

`torch.ops._c10d_functional.<op>` starts communication on the process group named by its last
argument and returns a pending result; `wait_tensor` makes it ready. Each becomes the IR op of
the same name, the group's name kept as the `group` attribute; the runtime issues them through
torch.distributed again, so pipec never carries data between ranks itself. A call pipec cannot
express (a process group passed as an object, a reduce op outside `COLLECTIVE_REDUCE_OPS`)
stays an extern.
"""

from __future__ import annotations

from pipec_ir import Ref, size_attr
from pipec_ir.ops import COLLECTIVE_REDUCE_OPS, COLLECTIVE_STARTS, VIEW_OPS

from .builder import GraphBuilder
from .table import NoLowering, register


def _group(group_name) -> str:
    if not isinstance(group_name, str):
        raise NoLowering(f"process group given as {type(group_name).__name__}, not by name")
    return group_name


def _reduce_op(reduce_op) -> str:
    if reduce_op not in COLLECTIVE_REDUCE_OPS:
        raise NoLowering(f"reduce op {reduce_op!r}")
    return reduce_op


def _producer_op(cx: GraphBuilder, x: Ref) -> str | None:
    """The op of the IR node defining `x` (None for a graph input)."""
    return next((n.op for n in reversed(cx.nodes) if n.name == x.name), None)


def _dense(cx: GraphBuilder, x: Ref) -> Ref:
    """`x` as dense row-major memory: the process group reads the tensor's storage as it is,
    and a view (a permute, a slice) would hand it another layout."""
    if _producer_op(cx, x) not in VIEW_OPS:
        return x
    return cx.emit("identity", [x], cx.shape(x), cx.dtype(x))


def _start(cx: GraphBuilder, node, op: str, x: Ref, **attrs) -> Ref:
    t = cx.result(node)
    return cx.emit(op, [_dense(cx, x)], t.shape, t.dtype, **attrs)


@register("_c10d_functional.all_reduce.default")
def lower_all_reduce(cx, node, x, reduce_op, group_name):
    return _start(cx, node, "all_reduce", x, reduce_op=_reduce_op(reduce_op), group=_group(group_name))


@register("_c10d_functional.all_gather_into_tensor.default")
def lower_all_gather(cx, node, x, group_size, group_name):
    return _start(cx, node, "all_gather_into_tensor", x, group_size=int(group_size), group=_group(group_name))


@register("_c10d_functional.reduce_scatter_tensor.default")
def lower_reduce_scatter(cx, node, x, reduce_op, group_size, group_name):
    return _start(cx, node, "reduce_scatter_tensor", x, reduce_op=_reduce_op(reduce_op),
                  group_size=int(group_size), group=_group(group_name))


@register("_c10d_functional.all_to_all_single.default")
def lower_all_to_all(cx, node, x, output_split_sizes, input_split_sizes, group_name):
    def splits(sizes):  # torch passes [] for "equal splits"
        return tuple(size_attr(s) for s in sizes) if sizes else None

    return _start(cx, node, "all_to_all_single", x, output_split_sizes=splits(output_split_sizes),
                  input_split_sizes=splits(input_split_sizes), group=_group(group_name))


@register("_c10d_functional.wait_tensor.default")
def lower_wait_tensor(cx, node, x):
    if _producer_op(cx, x) not in COLLECTIVE_STARTS:  # e.g. a start that stayed an extern
        raise NoLowering("a wait on a tensor no lowered collective started")
    t = cx.result(node)
    return cx.emit("wait_tensor", [x], t.shape, t.dtype)
