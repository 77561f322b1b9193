"""One Triton expression template per pointwise op.

Operands arrive as source-text names of values in their compute dtype (fp32 for
half inputs). A template is `fn(node, *operand_names) -> str`. Ops whose exact
semantics need libdevice (log1p, expm1, atan, ...) call it. Triton's CPU interpreter
cannot run libdevice: the runtime binds numpy stand-ins of the same names into the
kernels it loads for the interpreter (the source, and the GPU's code, stay as they are).
"""

from __future__ import annotations

from .dtypes import FLOAT_COMPUTE, tl_compute, tl_storage

_INV_SQRT2 = 0.7071067811865476
_SQRT_2_OVER_PI = 0.7978845608028654


def _tanh(a: str) -> str:
    # 2*sigmoid(2a) - 1: exact enough in fp32 and runs in the interpreter too.
    return f"(2.0 * tl.sigmoid(2.0 * ({a})) - 1.0)"


def _gelu(node, a):
    if node.attr("approximate", "none") == "tanh":
        inner = f"{_SQRT_2_OVER_PI} * ({a} + 0.044715 * {a} * {a} * {a})"
        return f"0.5 * {a} * (1.0 + {_tanh(inner)})"
    if node.type.dtype in ("bfloat16", "float16"):
        return f"_pipec_gelu_half({a})"  # triton_helpers.HELPERS: erfc's polynomial instead of libdevice's erf
    return f"0.5 * {a} * (1.0 + tl.erf({a} * {_INV_SQRT2}))"


def _is_float(node) -> bool:
    return node.type.dtype in FLOAT_COMPUTE


def _cast(node, a):
    if node.type.dtype == "bool":
        return f"({a} != 0)"
    if node.type.dtype in ("bfloat16", "float16"):
        # a cast to a half type rounds, as eager's does, and computing goes on in fp32. Kept in
        # fp32 without rounding, a bf16 ResNet-50 (the cast after each batch norm's fp32 math)
        # drifted to 2-3x eager's error against float64 and failed the numerics check
        return f"{a}.to({tl_storage(node.type.dtype)}).to(tl.float32)"
    return f"{a}.to({tl_compute(node.type.dtype)})"


def _div(node, a, b):
    return f"{a} / {b}"


def _floor_div(node, a, b):
    if _is_float(node):
        return f"tl.floor({a} / {b})"
    # Python floor division on integers (Triton's // truncates toward zero).
    return f"tl.where((({a} % {b}) != 0) & (({a} < 0) != ({b} < 0)), {a} // {b} - 1, {a} // {b})"


def _remainder(node, a, b):
    if _is_float(node):
        return f"({a} - tl.floor({a} / {b}) * {b})"
    return f"tl.where((({a} % {b}) != 0) & (({a} % {b} < 0) != ({b} < 0)), {a} % {b} + {b}, {a} % {b})"


def _fmod(node, a, b):
    return f"libdevice.fmod({a}, {b})" if _is_float(node) else f"({a} % {b})"


def _maximum(node, a, b):
    return f"tl.where(({a} > {b}) | ({a} != {a}), {a}, {b})"


def _minimum(node, a, b):
    return f"tl.where(({a} < {b}) | ({a} != {a}), {a}, {b})"


def _sign(node, a):
    # two comparisons cast and subtracted (0 for 0 and NaN, as eager): with triton 3.6 on sm_90
    # the nested tl.where over integer literals gave wrong signs for bfloat16 inputs
    t = tl_compute(node.type.dtype)
    return f"(({a} > 0).to({t}) - ({a} < 0).to({t}))"


def _rand(node, seed, position):
    # Philox keyed by the seed, counter = offset + the element's flat position in the node's
    # own shape: the same values however the kernel is blocked.
    fn = {"uniform": "tl.rand", "normal": "tl.randn"}[node.attr("distribution")]
    return f"{fn}({seed}, {position} + {int(node.attr('offset'))})"


POINTWISE: dict = {
    "identity": lambda n, a: a,
    "cast": _cast,
    "neg": lambda n, a: f"-{a}",
    "abs": lambda n, a: f"tl.abs({a})",
    "exp": lambda n, a: f"tl.exp({a})",
    "exp2": lambda n, a: f"tl.exp2({a})",
    "expm1": lambda n, a: f"libdevice.expm1({a})",
    "log": lambda n, a: f"tl.log({a})",
    "log2": lambda n, a: f"tl.log2({a})",
    "log1p": lambda n, a: f"libdevice.log1p({a})",
    "sqrt": lambda n, a: f"tl.sqrt({a})",
    "rsqrt": lambda n, a: f"tl.rsqrt({a})",
    "reciprocal": lambda n, a: f"(1.0 / {a})",
    "sin": lambda n, a: f"tl.sin({a})",
    "cos": lambda n, a: f"tl.cos({a})",
    "tan": lambda n, a: f"libdevice.tan({a})",
    "tanh": lambda n, a: _tanh(a),
    "sigmoid": lambda n, a: f"tl.sigmoid({a})",
    "relu": lambda n, a: f"tl.where({a} < 0, 0.0, {a})" if _is_float(n) else f"tl.where({a} < 0, 0, {a})",
    "silu": lambda n, a: f"({a} * tl.sigmoid({a}))",
    "gelu": _gelu,
    "erf": lambda n, a: f"tl.erf({a})",
    "floor": lambda n, a: f"tl.floor({a})",
    "ceil": lambda n, a: f"tl.ceil({a})",
    "round": lambda n, a: f"libdevice.nearbyint({a})",
    "trunc": lambda n, a: f"libdevice.trunc({a})",
    "sign": _sign,
    "square": lambda n, a: f"({a} * {a})",
    "logical_not": lambda n, a: f"({a} == 0)",
    "bitwise_not": lambda n, a: f"({a} == 0)" if n.type.dtype == "bool" else f"(~{a})",
    "isnan": lambda n, a: f"({a} != {a})",
    "isinf": lambda n, a: f"(tl.abs({a}) == float('inf'))",
    "atan": lambda n, a: f"libdevice.atan({a})",
    "asin": lambda n, a: f"libdevice.asin({a})",
    "acos": lambda n, a: f"libdevice.acos({a})",
    "sinh": lambda n, a: f"libdevice.sinh({a})",
    "cosh": lambda n, a: f"libdevice.cosh({a})",
    "add": lambda n, a, b: f"({a} + {b})" if n.type.dtype != "bool" else f"({a} | {b})",
    "sub": lambda n, a, b: f"({a} - {b})",
    "mul": lambda n, a, b: f"({a} * {b})" if n.type.dtype != "bool" else f"({a} & {b})",
    "div": _div,
    "truediv_floor": _floor_div,
    "pow": lambda n, a, b: f"libdevice.pow({a}, {b})",
    "maximum": _maximum,
    "minimum": _minimum,
    "eq": lambda n, a, b: f"({a} == {b})",
    "ne": lambda n, a, b: f"({a} != {b})",
    "lt": lambda n, a, b: f"({a} < {b})",
    "le": lambda n, a, b: f"({a} <= {b})",
    "gt": lambda n, a, b: f"({a} > {b})",
    "ge": lambda n, a, b: f"({a} >= {b})",
    "logical_and": lambda n, a, b: f"(({a} != 0) & ({b} != 0))",
    "logical_or": lambda n, a, b: f"(({a} != 0) | ({b} != 0))",
    "logical_xor": lambda n, a, b: f"(({a} != 0) ^ ({b} != 0))",
    "bitwise_and": lambda n, a, b: f"({a} & {b})",
    "bitwise_or": lambda n, a, b: f"({a} | {b})",
    "bitwise_xor": lambda n, a, b: f"({a} ^ {b})",
    "remainder": _remainder,
    "fmod": _fmod,
    "atan2": lambda n, a, b: f"libdevice.atan2({a}, {b})",
    "where": lambda n, c, a, b: f"tl.where({c}, {a}, {b})",
    "rand": _rand,
}

# Ops whose template calls libdevice (the runtime has an interpreter stand-in for each function;
# tests/test_interpreter_ops.py keeps this set, the templates and the stand-ins in step).
NEEDS_LIBDEVICE = frozenset(
    {"expm1", "log1p", "tan", "round", "trunc", "atan", "asin", "acos", "sinh", "cosh", "pow", "atan2", "fmod"}
)
