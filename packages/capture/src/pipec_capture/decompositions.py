"""pipec's own decompositions of Core ATen ops into ops it generates code for.

torch has no decomposition for these (Inductor lowers them with prims of its own); each is
written here in ATen ops that pipec lowers, so AOTAutograd traces it away before lowering.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def masked_scatter(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """`self` where `mask` is false; the k-th true position (in row-major order) takes
    `source.flatten()[k]`. k is a running count of the mask (a scan), then one gather and a
    select: three kernels at most, all generated, no data-dependent shapes. As in eager, `self`
    and `mask` broadcast to one shape, the result's."""
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    self, mask = self.expand(shape), mask.expand(shape)
    if self.numel() == 0 or source.numel() == 0:  # no true position can exist (eager checks counts)
        return self.clone(memory_format=torch.contiguous_format)
    order = torch.cumsum(mask.reshape(-1).to(torch.int64), 0) - 1
    # positions before the first true one (and every false one) read an in-range element
    # that the select below discards
    order = order.clamp(0, source.numel() - 1)
    taken = source.reshape(-1)[order].view(shape)
    return torch.where(mask, taken, self)


DECOMPOSITIONS = {
    aten.masked_scatter.default: masked_scatter,
}
