"""LayerNorm followed by a scaled softmax over the last dimension."""

import torch
from torch import nn


class NormSoftmax(nn.Module):
    def __init__(self, d: int = 64) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.scale = d ** -0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return torch.softmax(y * self.scale, dim=-1)


torch.manual_seed(0)
model = NormSoftmax().eval()
with torch.no_grad():  # non-trivial affine parameters
    model.norm.weight.uniform_(0.5, 1.5)
    model.norm.bias.uniform_(-0.5, 0.5)


def example_inputs():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(4, 16, 64, generator=g),)
