"""Index simplification: undo the flat-index decomposition where it cancels.

A contiguous load at the domain index prints as `x0*64 + x1`, with `x0 = xindex // 64`
and `x1 = xindex % 64`. Substituting and applying
    c*(X % b) + c*b*(X // b)  ->  c*X
gives back `xindex` (b may be a symbolic size: a dynamic resolution's width). The rewritten form is kept only when it has fewer divisions.
"""

from __future__ import annotations

import functools

import sympy
from pipec_ir.symbolic import FloorDiv, ModularIndexing


def _cost(expr) -> int:
    return sum(1 for e in sympy.preorder_traversal(expr) if isinstance(e, FloorDiv | ModularIndexing))


def collapse(expr: sympy.Expr) -> sympy.Expr:
    changed = True
    while changed:
        changed = False
        terms = sympy.expand(expr).as_coefficients_dict()
        for term, coeff in terms.items():
            term, coeff = _modulus_factor(term, coeff)
            if term is None:
                continue
            base, modulus = term.args
            partner = FloorDiv(base, modulus)
            if terms.get(partner) == coeff * modulus:
                expr = sympy.expand(expr - coeff * term - coeff * modulus * partner + coeff * base)
                changed = True
                break
            if modulus.is_Integer and coeff.is_Integer:
                continue
            # a symbolic modulus or coefficient is no number: try the rewrite with the partner
            # spelled either way ((X // b) // m is X // (b*m)), kept where both terms cancelled
            partners = [partner] + ([FloorDiv(base.args[0], base.args[1] * modulus)] if isinstance(base, FloorDiv) else [])
            for p in partners:
                rewritten = sympy.expand(expr - coeff * term - coeff * modulus * p + coeff * base)
                if _cost(rewritten) < _cost(expr):
                    expr, changed = rewritten, True
                    break
            if changed:
                break
    return expr


def _modulus_factor(term, coeff):
    """(ModularIndexing(X, b), its whole coefficient) of a term `coeff * term` that has one such
    factor (`s1*ModularIndexing(...)`: a symbolic stride times it), else (None, None)."""
    if isinstance(term, ModularIndexing):
        return term, sympy.sympify(coeff)
    if term.is_Mul:
        mods = [f for f in term.args if isinstance(f, ModularIndexing)]
        if len(mods) == 1:
            return mods[0], sympy.sympify(coeff) * (term / mods[0])
    return None, None


def simplify_index(expr: sympy.Expr, decompositions: dict) -> sympy.Expr:
    """`expr`, or its form over the flat indices (`decompositions`: domain variable -> its
    expression in them) where that costs fewer operations."""
    if not expr.free_symbols & set(decompositions):
        return expr
    return _simplified(expr, tuple(decompositions.items()))


# the same index over the same domain in every layer of a model: cached (a pure function of
# its arguments; half of a kernel's writing time was these expansions)
@functools.lru_cache(maxsize=8192)
def _simplified(expr: sympy.Expr, decompositions: tuple) -> sympy.Expr:
    decompositions = dict(decompositions)
    flat = collapse(expr.xreplace(decompositions))
    return flat if _cost(flat) < _cost(expr) + _symbol_cost(expr, decompositions) else expr


def _symbol_cost(expr, decompositions) -> int:
    # Each domain variable the original uses is itself a division in the prologue.
    return sum(_cost(decompositions[s]) for s in expr.free_symbols if s in decompositions)
