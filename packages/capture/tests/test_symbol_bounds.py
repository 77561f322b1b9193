"""`monotone_lower`: the least value of a size expression over its symbols' ranges, which
decides whether a cat part or a padded dim may be empty at run time (SymbolTable.surely_positive)."""

import sympy

from pipec_capture.symbols import monotone_lower
from pipec_ir.symbolic import FloorDiv, IntSqrt, ModularIndexing, size_symbol

s0, s1 = size_symbol("s0"), size_symbol("s1")
LOWERS = {"s0": 2, "s1": 3}


def test_growing_forms_take_their_value_at_the_lower_bounds():
    assert monotone_lower(s0 - 1, LOWERS) == 1  # a slice's length
    assert monotone_lower(FloorDiv(s0, 2) * FloorDiv(s1, 2), LOWERS) == 1  # SD3's image tokens
    assert monotone_lower(2 * s0 * s1 + 4, LOWERS) == 16
    assert monotone_lower(s0 ** 2, LOWERS) == 4
    assert monotone_lower(sympy.Max(s0, s1 - 3), LOWERS) == 2
    assert monotone_lower(FloorDiv(s0 - 2, 4), LOWERS) == 0  # may be empty


def test_forms_that_do_not_grow_with_every_symbol_have_no_bound():
    assert monotone_lower(s1 - s0, LOWERS) is None  # a cat part that may be empty
    assert monotone_lower(ModularIndexing(s0, 4), LOWERS) is None
    assert monotone_lower(FloorDiv(s1, s0), LOWERS) is None
    assert monotone_lower(size_symbol("s9"), LOWERS) is None  # a symbol with no range


def test_integer_square_root_of_a_size_is_intsqrt():
    """DiT's unpatchify, `int(seq ** 0.5)`, and `int(math.sqrt(n))`: torch traces
    TruncToInt(FloatPow(ToFloat(X), 0.5)) / TruncToInt(OpaqueUnaryFn_sqrt(ToFloat(X))), which is
    IntSqrt(X): X itself for a square, a host-evaluated size otherwise (h and w two symbols)."""
    from torch.utils._sympy.functions import FloatPow, OpaqueUnaryFn_sqrt, ToFloat

    from pipec_capture.symbols import _float_square_root_of

    x, y = sympy.Symbol("x", integer=True, positive=True), sympy.Symbol("y", integer=True, positive=True)
    assert _float_square_root_of(FloatPow(ToFloat(x * y), 0.5)) == x * y
    assert _float_square_root_of(OpaqueUnaryFn_sqrt(ToFloat(2 * x))) == 2 * x
    assert _float_square_root_of(FloatPow(ToFloat(x), 1.5)) is None  # no square root
    assert _float_square_root_of(FloatPow(x, 0.5)) is None
    assert IntSqrt(s0 ** 2) == s0 and IntSqrt(4 * s0 ** 2 * s1 ** 4) == 2 * s0 * s1 ** 2  # squares: the root
    assert IntSqrt(sympy.Integer(99)) == 9 and isinstance(IntSqrt(s0 * s1), IntSqrt)
    assert monotone_lower(IntSqrt(FloorDiv(s0, 2) * FloorDiv(s1, 2)), LOWERS) == 1
