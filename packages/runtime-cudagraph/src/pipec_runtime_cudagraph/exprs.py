"""Size expressions -> plain Python functions of the symbol values (compiled once at load)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import sympy

from pipec_ir.symbolic import pyexpr

_NAMESPACE = {
    "Max": max, "Min": min, "Abs": abs, "ceiling": math.ceil, "floor": math.floor, "isqrt": math.isqrt,
    "__builtins__": {"int": int, "max": max, "min": min},
}


def is_static(exprs: Sequence) -> bool:
    return all(not sympy.sympify(e).free_symbols for e in exprs)


def static_ints(exprs: Sequence) -> tuple[int, ...]:
    return tuple(int(sympy.sympify(e)) for e in exprs)


def compile_ints(exprs: Sequence, symbols: Sequence[str]) -> Callable[..., tuple[int, ...]]:
    """`f(*symbol_values) -> tuple(int(e) for e in exprs)`, symbols in the order given."""
    exprs = [sympy.sympify(e) for e in exprs]
    params = [f"_v{i}" for i in range(len(symbols))]
    rename = {}
    for e in exprs:
        for sym in e.free_symbols:
            if sym.name not in symbols:
                raise KeyError(sym.name)
            rename[sym] = sympy.Symbol(params[list(symbols).index(sym.name)], integer=True, positive=True)
    body = ", ".join(f"int({pyexpr(e.xreplace(rename))})" for e in exprs)
    source = f"lambda {', '.join(params)}: ({body}{',' if len(exprs) == 1 else ''})"
    return eval(compile(source, "<pipec sizes>", "eval"), dict(_NAMESPACE))  # noqa: S307 - our own printed sympy
