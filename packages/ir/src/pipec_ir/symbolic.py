"""Sympy helpers: symbols for sizes and index variables, integer division, printing.

Sizes in the IR are sympy expressions of named symbols (`s0`, `s1`, ...). Index
arithmetic uses `FloorDiv` and `ModularIndexing` instead of sympy's floor/Mod so
that simplification stays predictable and printing maps 1:1 onto `//` and `%`. A size may
also be `IntSqrt(n)`, the integer square root (a model's `int(seq ** 0.5)`), which only the
host evaluates (`isqrt`).
"""

from __future__ import annotations

import functools
import math
import re

import sympy

Expr = sympy.Expr


@functools.cache
def size_symbol(name: str) -> sympy.Symbol:
    """A tensor size symbol: a positive integer."""
    return sympy.Symbol(name, integer=True, positive=True)


@functools.cache
def index_symbol(name: str) -> sympy.Symbol:
    """An index variable: a non-negative integer."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def bounded_index(name: str, bound: int) -> sympy.Symbol:
    """An index variable known to be < `bound` (exclusive), which lets `FloorDiv` and
    `ModularIndexing` drop provably redundant `//` and `%`.

    The bound is part of the symbol's name (`x0_lt16`), so it travels with every expression
    the symbol is in: no table of bounds, nothing that depends on what ran earlier in the
    process, and sympy's evaluation cache (keyed by the expression) can never hand one bound's
    simplification to another. Two bounded indices with one name and bound mean the same.
    """
    return index_symbol(f"{name}_lt{int(bound)}")


_BOUND_IN_NAME = re.compile(r"_lt(\d+)$")


def renamed_index(symbol: sympy.Symbol, name: str) -> sympy.Symbol:
    """The index variable `name`, with the bound `symbol` carries (if any): the same facts
    under another name."""
    m = _BOUND_IN_NAME.search(symbol.name)
    return index_symbol(name + (m.group(0) if m else ""))


@functools.lru_cache(maxsize=4096)  # a pure function of the name; FloorDiv.eval asks often
def _bound_of(name: str) -> int | None:
    m = _BOUND_IN_NAME.search(name)
    return None if m is None else int(m.group(1)) - 1


class FloorDiv(sympy.Function):
    """Integer division of non-negative integers, printed as `a // b`."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, base, divisor):
        if divisor == 1:
            return base
        if base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if isinstance(base, FloorDiv):
            return FloorDiv(base.args[0], base.args[1] * divisor)
        # (a*d + b) // d  ->  a + b // d   when every term of a is a multiple of d
        if divisor.is_Integer and base.is_Add:
            multiples, rest = [], []
            for term in base.args:
                coeff, _ = term.as_coeff_Mul()
                (multiples if coeff.is_Integer and int(coeff) % int(divisor) == 0 else rest).append(term)
            if multiples:
                return sympy.Add(*[t / divisor for t in multiples]) + FloorDiv(sympy.Add(*rest), divisor)
        if not divisor.is_Integer and (base.is_Mul or base.is_Pow):
            # (s**2) // s -> s: an exact multiple of a symbolic divisor (Dynamo writes a view's
            # size back as `numel // other sizes`)
            quotient = base / divisor
            if quotient.as_numer_denom()[1] == 1:
                return quotient
        if base.is_Mul and divisor.is_Integer:
            coeff, rest = base.as_coeff_Mul()
            if coeff.is_Integer and int(coeff) % int(divisor) == 0:
                return (coeff / divisor) * rest
        bound = upper_bound(base)
        if bound is not None and divisor.is_Integer and bound < int(divisor):
            return sympy.Integer(0)
        return None


class ModularIndexing(sympy.Function):
    """`base % modulus` for a non-negative base."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, base, modulus):
        if modulus == 1 or base == 0:
            return sympy.Integer(0)
        if base.is_Integer and modulus.is_Integer:
            return sympy.Integer(int(base) % int(modulus))
        bound = upper_bound(base)
        if bound is not None and modulus.is_Integer and bound < int(modulus):
            return base
        # (a*m + b) % m  ->  b % m   when every term of a is a multiple of m and b stays
        # non-negative (4 - s % 4 is not 4 away from a base this function takes: -(s % 4))
        if modulus.is_Integer and base.is_Add:
            rest = [t for t in base.args
                    if not (t.as_coeff_Mul()[0].is_Integer and int(t.as_coeff_Mul()[0]) % int(modulus) == 0)]
            if len(rest) < len(base.args) and sympy.Add(*rest).is_nonnegative:
                return ModularIndexing(sympy.Add(*rest), modulus)
        return None


class IntSqrt(sympy.Function):
    """The integer square root of a non-negative integer, floor(sqrt(n)), printed as `isqrt(n)`.

    What a model's `int(n ** 0.5)` or `int(math.sqrt(n))` computes for a size n (the float
    square root of an integer below 2**52 truncates to exactly this): DiT's and the vision
    transformers' side of a square token grid. Triton cannot spell it, so kernels take it as a
    size parameter the runtime evaluates. The root of a perfect square is the expression itself:
    `IntSqrt(s0**2)` is `s0`, `IntSqrt(4*s0**2*s1**2)` is `2*s0*s1`."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, n):
        if n.is_Integer:
            return sympy.Integer(math.isqrt(int(n))) if int(n) >= 0 else None
        return exact_root(n)


# size functions Triton cannot spell: a kernel takes such a subexpression as a size parameter,
# evaluated by the runtime on the host
HOST_ONLY = (sympy.Max, sympy.Min, IntSqrt)


def exact_root(expr: sympy.Expr) -> sympy.Expr | None:
    """R with R**2 == `expr` read off its form (a product of even powers and square numbers), or None."""
    if expr.is_Integer:
        root = math.isqrt(int(expr)) if int(expr) >= 0 else -1
        return sympy.Integer(root) if root * root == int(expr) else None
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) % 2 == 0:
        return expr.base ** (int(expr.exp) // 2)
    if expr.is_Mul:
        parts = [exact_root(a) for a in expr.args]
        return None if None in parts else sympy.Mul(*parts)
    return None


def upper_bound(expr: sympy.Expr) -> int | None:
    """An inclusive upper bound for a non-negative integer expression, if one is known
    (an index symbol's from its name: `bounded_index`)."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return _bound_of(expr.name) if expr.is_nonnegative and not expr.is_positive else None
    if expr.is_Add:
        parts = [upper_bound(a) for a in expr.args]
        return None if None in parts else sum(parts)
    if expr.is_Mul:
        parts = [upper_bound(a) for a in expr.args]
        if None in parts or any(p < 0 for p in parts):
            return None
        return math.prod(parts)
    if isinstance(expr, FloorDiv) and expr.args[1].is_Integer:
        b = upper_bound(expr.args[0])
        return None if b is None else b // int(expr.args[1])
    if isinstance(expr, ModularIndexing) and expr.args[1].is_Integer:
        return int(expr.args[1]) - 1
    if isinstance(expr, IntSqrt):
        b = upper_bound(expr.args[0])
        return None if b is None or b < 0 else math.isqrt(b)
    return None


@functools.lru_cache(maxsize=65536)  # expressions are immutable; documents repeat them a lot
def parse_expr(text: str) -> sympy.Expr:
    """Parse an expression stored in the IR ("s0*4", "128")."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return sympy.Integer(int(text))
    functions = {"FloorDiv": FloorDiv, "ModularIndexing": ModularIndexing, "Max": sympy.Max, "Min": sympy.Min,
                 "IntSqrt": IntSqrt}
    names = {}
    for token in _identifiers(text):
        if token in functions:
            continue
        names[token] = size_symbol(token)
    names.update(functions)
    return sympy.sympify(text, locals=names)


def _identifiers(text: str) -> set[str]:
    out, cur = set(), ""
    for ch in text + " ":
        if ch.isalnum() or ch == "_":
            cur += ch
        else:
            if cur and not cur[0].isdigit():
                out.add(cur)
            cur = ""
    return out


def as_expr(value) -> sympy.Expr:
    if isinstance(value, sympy.Expr):
        return value
    if isinstance(value, int):
        return sympy.Integer(value)
    if isinstance(value, str):
        return parse_expr(value)
    raise TypeError(f"not a size expression: {value!r}")


def expr_str(expr: sympy.Expr) -> str:
    """The canonical string form used in JSON."""
    return str(expr)


def numel(shape) -> sympy.Expr:
    return sympy.Mul(*shape) if shape else sympy.Integer(1)


def contiguous_strides(shape) -> tuple[sympy.Expr, ...]:
    strides, acc = [], sympy.Integer(1)
    for size in reversed(shape):
        strides.append(acc)
        acc = acc * size
    return tuple(reversed(strides))


class _Printer(sympy.printing.str.StrPrinter):
    def _operand(self, expr) -> str:
        text = self._print(expr)
        return text if expr.is_Atom or isinstance(expr, FloorDiv | ModularIndexing) else f"({text})"

    def _print_FloorDiv(self, expr):
        return f"({self._operand(expr.args[0])} // {self._operand(expr.args[1])})"

    def _print_ModularIndexing(self, expr):
        return f"({self._operand(expr.args[0])} % {self._operand(expr.args[1])})"

    def _print_IntSqrt(self, expr):
        return f"isqrt({self._print(expr.args[0])})"

    def _print_Pow(self, expr, rational=False):
        base, exp = expr.args
        if exp.is_Integer and int(exp) > 0:
            return "*".join([f"({self._print(base)})"] * int(exp))
        return super()._print_Pow(expr, rational)


def pyexpr(expr) -> str:
    """Print an integer expression as Python/Triton source (`//` and `%`; `isqrt` for
    `IntSqrt`, which only Python evaluates: `math.isqrt`)."""
    return _printed(as_expr(expr))


@functools.lru_cache(maxsize=8192)  # codegen prints the same indices in every layer of a model
def _printed(expr) -> str:
    return _Printer().doprint(expr)
