"""Extern targets this runtime provides beyond ATen (docs/IR.md, "Choice groups").

`pipec.addmm_gelu_tanh(bias, a, b)` is `gelu(addmm(bias, a, b), approximate="tanh")`. On CUDA it
is one cuBLASLt call with the bias + GELU epilogue (`aten._addmm_activation(use_gelu=True)`,
whose GELU is the tanh approximation there); elsewhere the two ATen ops, because the CPU
kernel of `_addmm_activation` applies the exact GELU instead.
"""

from __future__ import annotations

import torch

_LIBRARY = torch.library.Library("pipec", "DEF")
_LIBRARY.define("addmm_gelu_tanh(Tensor bias, Tensor a, Tensor b) -> Tensor")


def _addmm_gelu_tanh_cuda(bias, a, b):
    return torch.ops.aten._addmm_activation.default(bias, a, b, use_gelu=True)


def _addmm_gelu_tanh_any(bias, a, b):
    return torch.nn.functional.gelu(torch.addmm(bias, a, b), approximate="tanh")


_LIBRARY.impl("addmm_gelu_tanh", _addmm_gelu_tanh_cuda, "CUDA")
_LIBRARY.impl("addmm_gelu_tanh", _addmm_gelu_tanh_any, "CompositeExplicitAutograd")

__all__: list[str] = []
