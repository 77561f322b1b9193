"""A training graph's forward saves the tensor a transposed view is taken of, not the view.

AOTAutograd's partitioner saves values for the backward as the forward computed them. A Linear's
backward reads its input and weight transposed (`permute(x, [1, 0])` for the weight's gradient,
`permute(w, [1, 0])` for the input's), and the partitioner often saves those permutes. A saved
permute reaches the backward program as a graph input with transposed strides, and pipec's
runtime makes every input its kernels read dense row-major first: one ATen copy of an
activation or weight per Linear and step. GPT-2's training step on the H200 (8 x 1024, bf16)
made 72 of them, 3.75 ms of its 22.1 ms of GPU time (`train_step.py --copies`).

Here each saved value that is a transpose (`permute`, `t`, `transpose`) of a row-major forward
value, and that the forward reads nowhere else, is replaced by that value, and the backward
takes the transpose itself, as a view of its input. Kernels then read the
transposed operand through the view (a GEMM template through its strides; cuBLAS through its
transpose flag), and nothing is copied. Other views are left alone.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .fx_edit import drop_dead_code

aten = torch.ops.aten


def save_view_bases(forward: torch.fx.GraphModule, backward: torch.fx.GraphModule) -> int:
    """Rewrite a partitioned (forward, backward) pair so that permutes are taken in the backward;
    returns how many saved values changed."""
    fw_nodes = {n.name: n for n in forward.graph.nodes}
    output = next(n for n in forward.graph.nodes if n.op == "output")
    outs = list(output.args[0])
    placeholders = [n for n in backward.graph.nodes if n.op == "placeholder"]
    rewritten = 0
    for placeholder in placeholders:
        saved = fw_nodes.get(placeholder.name)
        if saved is None or outs.count(saved) != 1 or saved.users.keys() - {output}:
            continue  # not saved, also a user output (that must stay the transpose), or read in the forward
        dims = _permutation(saved)
        base = saved.args[0] if dims is not None else None
        if not isinstance(base, torch.fx.Node) or not _row_major(base) or "val" not in placeholder.meta:
            continue  # the base would be copied in turn: nothing gained
        outs = [base if o is saved else o for o in outs]
        view_val = placeholder.meta["val"]
        placeholder.meta["val"] = base.meta["val"]
        with backward.graph.inserting_after(placeholders[-1]):
            view = backward.graph.call_function(aten.permute.default, (placeholder, dims))
        view.meta["val"] = view_val
        placeholder.replace_all_uses_with(view, delete_user_cb=lambda user, v=view: user is not v)
        rewritten += 1
    if rewritten:
        output.args = (tuple(outs),) + tuple(output.args[1:])
        drop_dead_code(forward.graph)
        forward.recompile()
        backward.recompile()
    return rewritten


def _permutation(node) -> list[int] | None:
    """The dims of a `permute`, `t` or `transpose` node as one permute's; None for any other node."""
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    rank = getattr(node.args[0].meta.get("val"), "ndim", None)
    if rank is None or rank < 2:
        return None
    if node.target is aten.permute.default:
        return [d % rank for d in node.args[1]]
    if node.target is aten.t.default:
        return [1, 0]
    if node.target is aten.transpose.int:
        dims = list(range(rank))
        a, b = node.args[1] % rank, node.args[2] % rank
        dims[a], dims[b] = dims[b], dims[a]
        return dims
    return None


def _row_major(node) -> bool:
    """The value is laid out dense row-major (the runtime hands it to kernels as it is)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return False
    expected = 1  # proven without guards: symbolic sizes must not be specialized here
    for size, stride in reversed(list(zip(val.shape, val.stride()))):
        if not (statically_known_true(size == 1) or statically_known_true(stride == expected)):
            return False
        expected = expected * size
    return True
