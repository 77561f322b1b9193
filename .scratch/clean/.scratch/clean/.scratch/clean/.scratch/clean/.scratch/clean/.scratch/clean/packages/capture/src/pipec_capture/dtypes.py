"""torch dtype <-> pipec_ir dtype names."""

from __future__ import annotations

import torch

from .errors import CaptureError

TORCH_TO_IR = {
    torch.float64: "float64", torch.float32: "float32", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
    torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}
IR_TO_TORCH = {v: k for k, v in TORCH_TO_IR.items()}


def ir_dtype(dtype: torch.dtype, what: str = "a value") -> str:
    try:
        return TORCH_TO_IR[dtype]
    except KeyError:
        raise CaptureError(
            f"{what} has dtype {dtype}, which pipec does not support "
            f"(supported: {', '.join(TORCH_TO_IR.values())}); run this part of the model outside pipec"
        ) from None


def torch_dtype(name: str) -> torch.dtype:
    return IR_TO_TORCH[name]


def is_float(name: str) -> bool:
    return name in ("float64", "float32", "float16", "bfloat16")


def acc_dtype(name: str) -> str:
    """The dtype statistics (mean/var/softmax) are computed in: float32 for half types."""
    return "float32" if name in ("float16", "bfloat16") else name
