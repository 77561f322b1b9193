"""Turn torch SymInts (sympy over torch's own symbols) into pipec size expressions."""

from __future__ import annotations

import sympy
import torch

from pipec_ir import SymbolRange
from pipec_ir.symbolic import FloorDiv, ModularIndexing, size_symbol

from .errors import CaptureError


class SymbolTable:
    """Maps torch's shape-env symbols to `s0`, `s1`, ... in order of first appearance."""

    def __init__(self) -> None:
        self._map: dict[sympy.Symbol, sympy.Symbol] = {}
        self._ranges: list[SymbolRange] = []
        self._defined: dict[sympy.Symbol, sympy.Expr] = {}  # unbacked symbol -> its pipec expression

    def define(self, sym: sympy.Symbol, expr: sympy.Expr) -> None:
        """Take torch's unbacked symbol `sym` as `expr` (a pipec expression over sizes pipec
        knows) wherever it appears: a size torch's fake kernels left unbacked although the
        sizes of the op's inputs determine it (lower.define_slice_length)."""
        self._defined[sym] = expr

    def mentions_defined(self, value) -> bool:
        """A SymInt/SymBool (or sympy expression) over a symbol `define` gave an expression."""
        expr = value.node.expr if isinstance(value, (torch.SymInt, torch.SymBool)) else value
        return isinstance(expr, sympy.Basic) and bool(expr.free_symbols & self._defined.keys())

    @property
    def ranges(self) -> tuple[SymbolRange, ...]:
        return tuple(self._ranges)

    def size(self, value) -> sympy.Expr:
        """An int, SymInt or sympy expression -> a pipec sympy expression."""
        if isinstance(value, bool):
            return sympy.Integer(int(value))
        if isinstance(value, int):
            return sympy.Integer(value)
        if isinstance(value, torch.SymInt):
            node = value.node
            expr = node.expr
            shape_env = getattr(node, "shape_env", None)
            if shape_env is not None:
                try:
                    expr = shape_env.replace(expr)
                except Exception:  # noqa: BLE001 - best effort simplification
                    pass
            return self._convert(sympy.sympify(expr), shape_env)
        if isinstance(value, sympy.Expr):
            ours = set(self._map.values())
            if value.free_symbols <= ours:  # already a pipec expression
                return value
            return self._convert(value, None)
        raise CaptureError(f"not a size: {value!r}")

    def shape(self, sizes) -> tuple[sympy.Expr, ...]:
        return tuple(self.size(s) for s in sizes)

    def _convert(self, expr: sympy.Expr, shape_env) -> sympy.Expr:
        if expr.is_Integer:
            return sympy.Integer(int(expr))
        if expr.is_Symbol:
            return self._defined[expr] if expr in self._defined else self._symbol(expr, shape_env)
        args = [self._convert(a, shape_env) for a in expr.args]
        if expr.is_Add:
            return sympy.Add(*args)
        if expr.is_Mul:
            return sympy.Mul(*args)
        if expr.is_Pow:
            return sympy.Pow(*args)
        name = type(expr).__name__
        if name in ("FloorDiv", "CleanDiv", "IntTrueDiv") and len(args) == 2:
            return FloorDiv(*args)
        if name == "ModularIndexing" and len(args) == 3:
            return ModularIndexing(FloorDiv(args[0], args[1]), args[2])
        if name in ("Mod", "PythonMod") and len(args) == 2:
            return ModularIndexing(*args)
        if name == "Max":
            return sympy.Max(*args)
        if name == "Min":
            return sympy.Min(*args)
        raise CaptureError(
            f"symbolic size {expr} uses {name}, which pipec cannot express; "
            "compile with dynamic=False (static shapes)"
        )

    def _symbol(self, sym: sympy.Symbol, shape_env) -> sympy.Symbol:
        if sym in self._map:
            return self._map[sym]
        name = f"s{len(self._map)}"
        ours = size_symbol(name)
        self._map[sym] = ours
        lower, upper, hint = 1, None, None
        if shape_env is not None:
            rng = getattr(shape_env, "var_to_range", {}).get(sym)
            if rng is not None:
                try:
                    lower = max(0, int(rng.lower))
                except (TypeError, ValueError, OverflowError):
                    lower = 0
                try:
                    up = rng.upper
                    upper = int(up) if getattr(up, "is_finite", True) and up.is_Integer else None
                except (TypeError, ValueError, OverflowError, AttributeError):
                    upper = None
            vals = getattr(shape_env, "backed_var_to_val", None)
            if vals is None:
                vals = getattr(shape_env, "var_to_val", {})
            val = vals.get(sym)
            if val is not None:
                hint = int(val)
        if hint is None:
            raise CaptureError(
                f"size {sym} has no example value (a data-dependent size); pipec cannot compile it - "
                "avoid data-dependent shapes (nonzero, masked_select, .item()) in the compiled region"
            )
        self._ranges.append(SymbolRange(name=name, lower=lower, upper=upper, hint=hint))
        return ours
