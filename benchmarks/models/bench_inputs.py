"""Random inputs for the benchmark model files: seeded, made directly on the GPU when there is one.

(Imported by the model files beside it; `pipec bench` puts a model file's folder on sys.path
while importing it.)
"""

import torch


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def randn(*shape: int, dtype: torch.dtype, seed: int, device: str | None = None) -> torch.Tensor:
    device = device or default_device()
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=device, dtype=dtype)
