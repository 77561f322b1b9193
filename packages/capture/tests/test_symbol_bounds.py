"""`monotone_lower`: the least value of a size expression over its symbols' ranges, which
decides whether a cat part or a padded dim may be empty at run time (SymbolTable.surely_positive)."""

import sympy

from pipec_capture.symbols import monotone_lower
from pipec_ir.symbolic import FloorDiv, ModularIndexing, size_symbol

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


def test_integer_square_root_of_a_square_size_is_its_root():
    """DiT's unpatchify, `int(seq ** 0.5)` of seq = (h // 2)**2: torch traces
    TruncToInt(FloatPow(ToFloat(X**2), 0.5)), which is X; a non-square has no pipec form."""
    from torch.utils._sympy.functions import FloatPow, ToFloat

    from pipec_capture.symbols import _exact_square_root

    x, y = sympy.Symbol("x", integer=True, positive=True), sympy.Symbol("y", integer=True, positive=True)
    assert _exact_square_root(FloatPow(ToFloat(x ** 2), 0.5)) == x
    assert _exact_square_root(FloatPow(ToFloat(4 * x ** 2 * y ** 4), 0.5)) == 2 * x * y ** 2
    assert _exact_square_root(FloatPow(ToFloat(x * y), 0.5)) is None
    assert _exact_square_root(FloatPow(ToFloat(2 * x ** 2), 0.5)) is None
