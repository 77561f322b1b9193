"""A small MLP with GELU activations (exact and tanh-approximated)."""

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, d_hidden: int = 64, d_out: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.fc3 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.gelu(self.fc1(x))
        x = nn.functional.gelu(self.fc2(x), approximate="tanh")
        return self.fc3(x)


torch.manual_seed(0)
model = MLP().eval()


def example_inputs():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(8, 32, generator=g),)
