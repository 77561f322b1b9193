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

# What a specialized run (specialize.py) calls instead of a pipec.* target on one device type:
# (ATen overload, extra keyword arguments). Through the dispatcher and the Python impl above the
# call cost ~20 us more host time per call than the ATen op (GPT-2 block, H200's host, cProfile).
DIRECT = {
    ("pipec.addmm_gelu_tanh.default", "cuda"): (torch.ops.aten._addmm_activation.default, (("use_gelu", True),)),
}


def direct_call(target: str, device_type: str):
    """(ATen overload, extra kwargs) that computes `target` on this device type, or None."""
    return DIRECT.get((target, device_type))


__all__ = ["direct_call"]
