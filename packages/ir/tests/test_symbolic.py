"""Index bounds travel with their symbols (pipec_ir.symbolic.bounded_index): how an expression
simplifies depends on the expression alone, never on what else ran in the process."""

from pipec_ir.symbolic import FloorDiv, ModularIndexing, bounded_index, index_symbol, size_symbol, upper_bound


def test_a_bounded_index_drops_redundant_division_and_modulo():
    a, b = index_symbol("a"), bounded_index("b", 16)
    assert FloorDiv(a * 16 + b, 16) == a
    assert ModularIndexing(a * 16 + b, 16) == b
    assert upper_bound(b) == 15 and upper_bound(a * 0 + b * 2 + 1) == 31


def test_one_name_under_two_bounds_is_two_symbols():
    """sympy caches FloorDiv by its arguments: a bound kept outside the symbol (a table written
    later) would let the first evaluation's answer stand for every bound."""
    a = index_symbol("a")
    unbounded = FloorDiv(a * 16 + index_symbol("b"), 16)
    assert unbounded == a + FloorDiv(index_symbol("b"), 16)
    assert FloorDiv(a * 16 + bounded_index("b", 16), 16) == a
    assert FloorDiv(a * 16 + bounded_index("b", 32), 16) == a + FloorDiv(bounded_index("b", 32), 16)
    assert FloorDiv(a * 16 + index_symbol("b"), 16) == unbounded  # still unbounded afterwards


def test_only_index_symbols_carry_bounds():
    assert upper_bound(size_symbol("s_lt4")) is None  # a size symbol is never an index's bound
    assert upper_bound(index_symbol("take_k_tmp3")) is None
