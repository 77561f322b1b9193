"""`lower_bound` and `surely_at_least`: what a size expression is at least over its symbols'
ranges, which decides whether a cat part or a padded dim may be empty at run time
(SymbolTable.surely_positive)."""

import sympy

from pipec_capture.symbols import lower_bound, surely_at_least
from pipec_ir.symbolic import FloorDiv, IntSqrt, ModularIndexing, size_symbol

s0, s1 = size_symbol("s0"), size_symbol("s1")
LOWERS = {"s0": 2, "s1": 3}


def test_growing_forms_take_their_value_at_the_lower_bounds():
    assert lower_bound(s0 - 1, LOWERS) == 1  # a slice's length
    assert lower_bound(FloorDiv(s0, 2) * FloorDiv(s1, 2), LOWERS) == 1  # SD3's image tokens
    assert lower_bound(2 * s0 * s1 + 4, LOWERS) == 16
    assert lower_bound(s0 ** 2, LOWERS) == 4
    assert lower_bound(sympy.Max(s0, s1 - 3), LOWERS) == 2
    assert lower_bound(FloorDiv(s0 - 2, 4), LOWERS) == 0  # may be empty


def test_forms_that_do_not_grow_with_every_symbol_have_no_bound_or_the_least_one():
    assert lower_bound(s1 - s0, LOWERS) is None  # a cat part that may be empty
    assert lower_bound(-ModularIndexing(s0, 4), LOWERS) is None
    assert lower_bound(size_symbol("s9"), LOWERS) is None  # a symbol with no range
    assert lower_bound(ModularIndexing(s0, 4), LOWERS) == 0  # a remainder: 0 at the least
    assert lower_bound(FloorDiv(s1, s0), LOWERS) == 0  # a division by a size may reach 0
    assert lower_bound(FloorDiv(s1, s0 - 2), LOWERS) is None  # ... and by 0


def test_swins_padded_window_grid_cut_back_is_never_empty():
    """Swin at a resolution its window does not divide: the grid is padded to a multiple of the
    window, flattened, and viewed as rows of the padded height, `(A*B) // C`. Each of A and C is
    a floor division of the patch count by 2, A's padded (`x % 2` more): A >= C, so it is at
    least 1 wherever B and C are; a lower bound of the expression alone gives 0."""
    x, y = FloorDiv(s0, 4), FloorDiv(s1, 4)
    a = FloorDiv(x + ModularIndexing(x, 2) + 1, 2)
    b = FloorDiv(y + ModularIndexing(y, 2) + 1, 2)
    c = FloorDiv(x + 1, 2)
    grid = FloorDiv(a * b, c)
    assert lower_bound(grid, {"s0": 4, "s1": 4}) == 0
    assert surely_at_least(grid, 1, {"s0": 4, "s1": 4})
    assert surely_at_least(a, c, {"s0": 0, "s1": 0})
    assert not surely_at_least(grid, 1, {"s0": 2, "s1": 4})  # 2 x 4 pixels: no patch row, C = 0
    assert not surely_at_least(grid, 1, {"s0": 4, "s1": 2})  # B = 0
    assert not surely_at_least(FloorDiv(b, c), 1, {"s0": 4, "s1": 4})  # B may be below C
    assert not surely_at_least(c, a, {"s0": 4, "s1": 4})


def test_floor_divisions_and_products_compare_through_their_parts():
    grid = FloorDiv(s0 * s1 + 1, s0)
    assert lower_bound(grid, LOWERS) == 0
    assert surely_at_least(grid, 1, LOWERS)  # p // q >= 1 where p >= q
    assert surely_at_least(grid, 3, LOWERS)
    assert not surely_at_least(grid, 4, LOWERS)
    assert surely_at_least(FloorDiv(s1 + 2, 4), FloorDiv(s1, 4), LOWERS)
    assert not surely_at_least(FloorDiv(s1, 4), FloorDiv(s1, 2), LOWERS)
    assert not surely_at_least(s1 - s0, 1, LOWERS)


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
    assert lower_bound(IntSqrt(FloorDiv(s0, 2) * FloorDiv(s1, 2)), LOWERS) == 1
