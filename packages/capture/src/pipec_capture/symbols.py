"""Turn torch SymInts (sympy over torch's own symbols) into pipec size expressions."""

from __future__ import annotations

import math
import weakref

import sympy
import torch

from pipec_ir import SymbolRange
from pipec_ir.symbolic import FloorDiv, IntSqrt, ModularIndexing, size_symbol, upper_bound

from .errors import CaptureError


# shape env -> {unbacked symbol: its definition over torch's symbols}: shared by the graphs one
# torch.compile traces with that shape env (an AOTAutograd forward and its backward)
_DEFINITIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _known_constant(shape_env, expr: sympy.Expr) -> int | None:
    """The value of torch's size expression `expr` when the guards prove it equals its hint.

    Tracing may guard a compound size to one value (a slice of symbolic start and step whose
    length a later op needs to be 1) without a replacement for any symbol; torch's fake tensors
    then carry the constant downstream while the size itself stays an expression, and the IR
    could not relate the two (a broadcast of `(-s3 + s4)//s4` to `1`)."""
    hints = _hints(shape_env)
    if not all(sym in hints for sym in expr.free_symbols):  # unbacked: no example value
        return None
    try:
        hint = int(expr.xreplace({sym: hints[sym] for sym in expr.free_symbols}))
        proved = shape_env._maybe_evaluate_static(sympy.Eq(expr, hint))
    except Exception:  # noqa: BLE001 - torch's private API moved: no constant
        return None
    return hint if proved is not None and bool(proved) else None


def _hints(shape_env) -> dict:
    """The shape env's example value of each backed symbol (torch renamed the map over time)."""
    vals = getattr(shape_env, "backed_var_to_val", None)
    return vals if vals is not None else getattr(shape_env, "var_to_val", {})


class SymbolTable:
    """Maps torch's shape-env symbols to `s0`, `s1`, ... in order of first appearance."""

    def __init__(self) -> None:
        self._map: dict[sympy.Symbol, sympy.Symbol] = {}
        self._ranges: list[SymbolRange] = []
        self._defined: dict[sympy.Symbol, sympy.Expr] = {}  # unbacked symbol -> definition (torch's symbols)
        self._shape_env = None
        # a compound pipec size -> the torch expression it was converted from: torch's guards
        # are written in torch's spelling, which pipec's (python_mod's shifted remainders,
        # two-argument ModularIndexing) does not always convert back to (provably_equal)
        self._origins: dict[sympy.Expr, sympy.Expr] = {}

    def define(self, sym: sympy.Symbol, expr: sympy.Expr, shape_env=None) -> None:
        """Take torch's unbacked symbol `sym` as `expr` (over torch's symbols) wherever it
        appears: a size torch's fake kernels left unbacked although the sizes of the op's inputs
        determine it (lower.define_slice_length). Other graphs of the same shape env see it too."""
        self._defined[sym] = expr
        if shape_env is not None:
            _DEFINITIONS.setdefault(shape_env, {})[sym] = expr

    def _definition(self, sym: sympy.Symbol, shape_env) -> sympy.Expr | None:
        if sym in self._defined:
            return self._defined[sym]
        shared = _DEFINITIONS.get(shape_env) if shape_env is not None else None
        return shared.get(sym) if shared else None

    def mentions_defined(self, value) -> bool:
        """A SymInt/SymBool (or sympy expression) over a symbol `define` gave an expression."""
        shape_env = value.node.shape_env if isinstance(value, (torch.SymInt, torch.SymBool)) else None
        expr = value.node.expr if isinstance(value, (torch.SymInt, torch.SymBool)) else value
        return isinstance(expr, sympy.Basic) and any(self._definition(s, shape_env) is not None
                                                     for s in expr.free_symbols)

    def input_size(self, value: torch.SymInt) -> sympy.Expr:
        """A SymInt graph argument: its symbol is bound from the argument itself (a size-only
        input), so an unbacked one that another graph defined (a backward graph takes the
        forward's slice length u0) becomes a symbol of its own, with its definition's value at
        the trace's sizes as hint; anything else converts as `size` does."""
        shape_env, expr = value.node.shape_env, value.node.expr
        definition = self._definition(expr, shape_env) if expr.is_Symbol and expr not in self._map else None
        if definition is None:
            return self.size(value)
        hints = _hints(shape_env)
        try:
            hint = int(definition.xreplace({s: hints[s] for s in definition.free_symbols}))
        except (KeyError, TypeError, ValueError):
            return self.size(value)
        return self._symbol(expr, shape_env, hint)

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
            converted = self._convert(sympy.sympify(expr), shape_env)
            if shape_env is None or converted.is_Symbol or converted.is_number:
                return converted
            self._origins.setdefault(converted, sympy.sympify(expr))
            # a compound size that stays compound in pipec's terms (`(s**2)//s` is just `s`, and
            # is kept so: other values of the graph carry `s`): its guarded value, if any
            value = _known_constant(shape_env, sympy.sympify(expr))
            return converted if value is None else sympy.Integer(value)
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
            definition = self._definition(expr, shape_env) if expr not in self._map else None
            return self._symbol(expr, shape_env) if definition is None else self._convert(definition, shape_env)
        if type(expr).__name__ in ("TruncToInt", "FloorToInt") and len(expr.args) == 1:
            radicand = _float_square_root_of(expr.args[0])
            if radicand is not None:  # int(n ** 0.5) of a size: DiT's unpatchify, a ViT's grid side
                return IntSqrt(self._convert(radicand, shape_env))
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
            return python_mod(*args)
        if name == "Max":
            return sympy.Max(*args)
        if name == "Min":
            return sympy.Min(*args)
        raise CaptureError(
            f"symbolic size {expr} uses {name}, which pipec cannot express; "
            "compile with dynamic=False (static shapes)"
        )

    def provably_equal(self, a, b) -> bool:
        """Whether torch's guards make the pipec sizes `a` and `b` equal: tracing can guard two
        different spellings of one size equal (a slice's `s - t` and `s` where a guard says
        t = 0) without rewriting either, and the fake tensors then mix them (MPT's ALiBi slice
        `64 - Max(0, 64 - s)`, guarded equal to the key length `s`)."""
        env = self._shape_env
        if env is None:
            return False
        back = {ours: theirs for theirs, ours in self._map.items()}
        try:
            ta, tb = (self._origins.get(x) or _as_torch(x.xreplace(back)) for x in map(sympy.sympify, (a, b)))
            if ta is None or tb is None:
                return False  # a function of pipec's that torch has no form of (IntSqrt)
            return bool(env._maybe_evaluate_static(sympy.Eq(ta, tb)))
        except Exception:  # noqa: BLE001 - undecided (or torch's private API moved): not equal
            return False

    def surely_positive(self, size) -> bool:
        """Is `size` at least 1 for every value its symbols may take (`surely_at_least`, with
        each symbol's range from torch's shape env)? A part of a cat that may be empty at run
        time, `s1 - s0`, is not; SD3's image tokens `FloorDiv(s0, 2)*FloorDiv(s1, 2)` with
        s0, s1 >= 2 are, and so is Swin's padded window grid cut back to rows of its padded
        height (a division by a size)."""
        size = sympy.sympify(size)
        lowers = {r.name: r.lower for r in self._ranges}
        if any(s.name not in lowers or lowers[s.name] < 0 for s in size.free_symbols):
            return False
        return surely_at_least(size, 1, lowers)

    def _symbol(self, sym: sympy.Symbol, shape_env, given_hint: int | None = None) -> sympy.Symbol:
        if shape_env is not None:
            self._shape_env = shape_env  # one per Dynamo graph: the guards provably_equal asks
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
                except (TypeError, ValueError, OverflowError, AttributeError):  # -int_oo: int() raises AttributeError
                    lower = 0
                try:
                    up = rng.upper
                    upper = int(up) if getattr(up, "is_finite", True) and up.is_Integer else None
                except (TypeError, ValueError, OverflowError, AttributeError):
                    upper = None
            val = _hints(shape_env).get(sym)
            if val is not None:
                hint = int(val)
        hint = given_hint if hint is None else hint
        if hint is None:
            raise CaptureError(
                f"size {sym} has no example value (a data-dependent size); pipec cannot compile it - "
                "avoid data-dependent shapes (nonzero, masked_select, .item()) in the compiled region"
            )
        self._ranges.append(SymbolRange(name=name, lower=lower, upper=upper, hint=hint))
        return ours


def lower_bound(expr: sympy.Expr, lowers: dict[str, int]) -> int | None:
    """A lower bound of `expr` over symbols at or above their lower bounds (`lowers`, by name,
    all >= 0), by interval arithmetic over forms that grow with each symbol (sums, products of
    non-negative factors, floor divisions by a positive constant, powers, Max / Min, IntSqrt),
    with a remainder at least 0 and a floor division by a positive size at least 0. None where
    the form gives none (a negative coefficient on a symbol, a symbol with no range)."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return lowers.get(expr.name)
    if expr.is_Add:
        parts = [lower_bound(a, lowers) for a in expr.args]  # a constant may be negative
        return None if None in parts else sum(parts)
    if expr.is_Mul:
        parts = [lower_bound(a, lowers) for a in expr.args]
        if None in parts or any(p < 0 for p in parts):  # a negative factor turns growth around
            return None
        return math.prod(parts)
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        base = lower_bound(expr.base, lowers)
        return None if base is None or base < 0 else base ** int(expr.exp)
    if isinstance(expr, FloorDiv):
        num, den = (lower_bound(a, lowers) for a in expr.args)
        if num is None or den is None or den < 1:
            return None
        return num // int(expr.args[1]) if expr.args[1].is_Integer else (0 if num >= 0 else None)
    if isinstance(expr, ModularIndexing):  # pipec's remainder is in [0, modulus)
        return 0
    if isinstance(expr, IntSqrt):
        n = lower_bound(expr.args[0], lowers)
        return None if n is None or n < 0 else math.isqrt(n)
    if isinstance(expr, (sympy.Max, sympy.Min)):
        parts = [lower_bound(a, lowers) for a in expr.args]
        return None if None in parts else (max if isinstance(expr, sympy.Max) else min)(parts)
    return None


def surely_at_least(a, b, lowers: dict[str, int]) -> bool:
    """Is size `a` >= `b` for every value of the symbols at or above their lower bounds? First
    by a lower bound of `a - b` (sympy cancels the terms they share), then through the forms a
    padded-and-cut size takes: floor divisions by one constant compare their numerators,
    `p // q >= b` where `p >= b*q` (q >= 1), a factor both sides share cancels, a sum reaches `b`
    where one term does and the others are at least 0, and a product where one factor does and
    the others are at least 1. Swin's window grid `(A*B) // C`, with `A = (x + x % 2 + 1) // 2`
    and `C = (x + 1) // 2`, is at least 1 this way; no bound of the difference shows it."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    low = lower_bound(a - b, lowers)
    if low is not None and low >= 0:
        return True
    if isinstance(a, FloorDiv) and a.args[1].is_Integer and int(a.args[1]) > 0:
        if isinstance(b, FloorDiv) and b.args[1] == a.args[1]:
            return surely_at_least(a.args[0], b.args[0], lowers)
    if isinstance(a, FloorDiv) and surely_at_least(a.args[1], 1, lowers):
        return surely_at_least(a.args[0], b * a.args[1], lowers)
    for factor in set(sympy.Mul.make_args(a)) & set(sympy.Mul.make_args(b)) - {sympy.Integer(1)}:
        low = lower_bound(factor, lowers)  # f*x >= f*y where x >= y and f >= 0
        if low is not None and low >= 0:
            return surely_at_least(a / factor, b / factor, lowers)
    if a.is_Add:  # one term reaches b and the others are at least 0
        for term in a.args:
            low = lower_bound(a - term, lowers)
            if low is not None and low >= 0 and surely_at_least(term, b, lowers):
                return True
    if a.is_Mul and surely_at_least(b, 0, lowers):
        for i, factor in enumerate(a.args):
            rest = sympy.Mul(*(a.args[:i] + a.args[i + 1:]))
            if surely_at_least(rest, 1, lowers) and surely_at_least(factor, b, lowers):
                return True
    return False


def _float_square_root_of(expr) -> sympy.Expr | None:
    """X where `expr` is torch's float square root of an integer X: `FloatPow(ToFloat(X), 0.5)`
    (`n ** 0.5`) or `OpaqueUnaryFn_sqrt(ToFloat(X))` (`math.sqrt(n)`). Truncated to an integer it
    is `IntSqrt(X)` for every size X below 2**52 (the float root is correctly rounded)."""
    name = type(expr).__name__
    if name == "FloatPow" and len(expr.args) == 2 and expr.args[1] == sympy.Float(0.5):
        inner = expr.args[0]
    elif name == "OpaqueUnaryFn_sqrt" and len(expr.args) == 1:
        inner = expr.args[0]
    else:
        return None
    return inner.args[0] if type(inner).__name__ == "ToFloat" and len(inner.args) == 1 else None


def python_mod(base: sympy.Expr, modulus: sympy.Expr) -> sympy.Expr:
    """Python's `base % modulus` as a ModularIndexing, which pipec (its codegen's `%` included)
    evaluates for a non-negative base only. A base that may be negative, with a known bound (Swin's
    pad to a multiple of its window, `(-s) % 4` = `ModularIndexing(-ModularIndexing(s, 4), 4)`),
    is first shifted by a multiple of the modulus, which leaves Python's result unchanged: without
    it a padded size came out as `s - s % 4` and the kernels read past their inputs."""
    lowest = upper_bound(-base) if modulus.is_Integer and int(modulus) > 0 else None
    if lowest is not None and lowest > 0 and not base.is_nonnegative:
        base = base + -(-lowest // int(modulus)) * modulus
    return ModularIndexing(base, modulus)


def _as_torch(expr: sympy.Expr) -> sympy.Expr | None:
    """`expr` (over torch's symbols) in the functions torch's guards are written in: sympy's Max and
    Min as torch's classes of those names, pipec's FloorDiv as torch's, its `ModularIndexing(a, m)`
    as torch's `ModularIndexing(a, 1, m)`. Two spellings of one size then compare as torch would
    compare them (Swin's window grid, padded to a multiple of the window and cut back). None for
    an expression with a function torch has no form of (IntSqrt)."""
    from torch.utils._sympy import functions

    if expr.is_Atom:
        return expr
    args = [_as_torch(a) for a in expr.args]
    if any(a is None for a in args):
        return None
    if isinstance(expr, FloorDiv):
        return functions.FloorDiv(*args)
    if isinstance(expr, ModularIndexing):
        return functions.ModularIndexing(args[0], sympy.Integer(1), args[1])
    if isinstance(expr, sympy.Max):
        return functions.Max(*args)
    if isinstance(expr, sympy.Min):
        return functions.Min(*args)
    if isinstance(expr, IntSqrt):
        return None
    return expr.func(*args)
