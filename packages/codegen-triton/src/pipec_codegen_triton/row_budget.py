"""How many bytes per row element a persistent (one-pass) reduction kernel keeps in registers.

A persistent row kernel holds whole rows as [XBLOCK, RBLOCK] blocks. What it must hold at once
is at least its row-level inputs, loaded together, and at most whatever is still needed after a
reduction: a block computed before a `tl.sum` and read again after it stays live across it.

Softmax and layer_norm's forward keep one block live (the input, or exp(x - max)); layer_norm's
backward keeps three (the gradient in fp32, gradient x weight, and x normalised) across its second
sum. At 16384 bf16 columns those three are 192 KiB per row and spill: on the H200 the training
step (forward + backward, 4096 rows) took 0.690 ms held against 0.513 looped; at 8192 fp32 columns
(96 KiB) holding was faster, 0.428 against 0.527.

The model follows writer.py's persistent emission: reductions are written in kernel order, each
computing the values it needs that are not yet written; row-level outputs are stored after the
last reduction. Views compute nothing and stand for their source. This module only reads the IR.
"""

from __future__ import annotations

from pipec_ir import ITEMSIZE
from pipec_ir.ops import REDUCTION, VIEW, kind_of


def held_bytes_per_element(nodes: dict, types: dict, kernel_nodes, kernel_inputs, kernel_outputs,
                           domain: tuple) -> int:
    """Bytes a persistent row kernel holds per row element: the larger of its row-level inputs
    (loaded together) and the most row-level values live across any one reduction. A value counts
    as it is held, at least 4 bytes (half types are computed in fp32)."""
    def held(name) -> int:
        return max(4, ITEMSIZE.get(types[name].dtype, 4))

    def row_level(name) -> bool:
        return tuple(types[name].shape) == domain and not _is(nodes, in_kernel, name, REDUCTION)

    in_kernel = set(kernel_nodes)
    inputs = sum(held(i) for i in kernel_inputs if tuple(types[i].shape) == domain)
    live = _live_across_reductions(nodes, in_kernel, kernel_nodes, kernel_outputs)
    across = max((sum(held(v) for v in values if row_level(v)) for values in live), default=0)
    return max(inputs, across, 4)


def _is(nodes, in_kernel, name, kind) -> bool:
    return name in in_kernel and kind_of(nodes[name].op) == kind


def _live_across_reductions(nodes, in_kernel, kernel_nodes, kernel_outputs) -> list[set[str]]:
    """For each reduction, in order: the values written before or while it is and read after it."""
    def source(name):
        while _is(nodes, in_kernel, name, VIEW):
            name = nodes[name].inputs[0]
        return name

    reductions = [n for n in kernel_nodes if kind_of(nodes[n].op) == REDUCTION]
    end = len(reductions)  # row-level outputs are stored after the last reduction
    stage: dict[str, int] = {}  # value -> the reduction whose writing first needs it

    def mark(name, k):
        name = source(name)
        if stage.get(name, end + 1) <= k:
            return  # already written, and so is everything it reads
        stage[name] = k
        if name in in_kernel and kind_of(nodes[name].op) != REDUCTION:
            for i in nodes[name].inputs:
                mark(i, k)

    for k, r in enumerate(reductions):
        stage[r] = k
        for i in nodes[r].inputs:
            mark(i, k)
    for o in kernel_outputs:
        mark(o, end)

    last_use: dict[str, int] = {source(o): end for o in kernel_outputs}
    for c in kernel_nodes:
        if kind_of(nodes[c].op) == VIEW or c not in stage:
            continue
        for i in nodes[c].inputs:
            v = source(i)
            last_use[v] = max(last_use.get(v, -1), stage[c])
    return [{v for v, k0 in stage.items() if k0 <= k < last_use.get(v, -1) and v not in reductions}
            for k in range(end)]
