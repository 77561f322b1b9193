"""Helpers of the benchmark model files: seeded random inputs, made directly on the GPU when there
is one, and classes defined elsewhere in the repository.

(Imported by the model files beside it; `pipec bench` puts a model file's folder on sys.path
while importing it.)
"""

import importlib.util
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]


def class_from(relative_path: str, module_name: str, class_name: str):
    """`class_name` from a Python file of the repository (one definition of each model)."""
    spec = importlib.util.spec_from_file_location(module_name, REPO / relative_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Dynamo and pickling look classes up by module name
    spec.loader.exec_module(module)
    return getattr(module, class_name)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def randn(*shape: int, dtype: torch.dtype, seed: int, device: str | None = None) -> torch.Tensor:
    device = device or default_device()
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=device, dtype=dtype)
