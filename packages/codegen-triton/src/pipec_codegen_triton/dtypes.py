"""dtype names in the IR -> Triton types (compute and storage)."""

from __future__ import annotations

FLOAT_COMPUTE = ("float64", "float32", "float16", "bfloat16")

_STORAGE = {
    "float64": "tl.float64", "float32": "tl.float32", "float16": "tl.float16", "bfloat16": "tl.bfloat16",
    "int64": "tl.int64", "int32": "tl.int32", "int16": "tl.int16", "int8": "tl.int8", "uint8": "tl.uint8",
    "bool": "tl.int1",
}


def tl_storage(dtype: str) -> str:
    return _STORAGE[dtype]


def tl_compute(dtype: str) -> str:
    """Half types compute in fp32 (accumulate in fp32; round on store, and where a `cast` to a
    half type says so: pointwise_ops._cast)."""
    if dtype in ("float16", "bfloat16"):
        return "tl.float32"
    return _STORAGE[dtype]


def literal(value, dtype: str) -> str:
    if dtype == "bool":
        return "1" if value else "0"
    if dtype in FLOAT_COMPUTE:
        v = float(value)
        if v != v:
            return "float('nan')"
        if v in (float("inf"), float("-inf")):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    return str(int(value))


def lowest(dtype: str) -> str:
    if dtype in FLOAT_COMPUTE:
        return "float('-inf')"
    if dtype == "bool":
        return "0"
    bits = {"int64": 63, "int32": 31, "int16": 15, "int8": 7, "uint8": 0}[dtype]
    return str(-(2 ** bits)) if bits else "0"


def highest(dtype: str) -> str:
    if dtype in FLOAT_COMPUTE:
        return "float('inf')"
    if dtype == "bool":
        return "1"
    bits = {"int64": 63, "int32": 31, "int16": 15, "int8": 7, "uint8": 8}[dtype]
    return str(2 ** bits - 1)
