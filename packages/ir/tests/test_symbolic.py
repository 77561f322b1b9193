"""Index bounds travel with their symbols (pipec_ir.symbolic.bounded_index): how an expression
simplifies depends on the expression alone, never on what else ran in the process."""

import sympy
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


def test_floordiv_of_an_exact_multiple_of_a_symbolic_divisor():
    """Dynamo writes a view's size back as `numel // other sizes`: `(s**2)//s` is `s`, or the
    same size has two spellings in one graph (a broadcast of (s, s) to (s, (s**2)//s) failed)."""
    s, t = sympy.Symbol("s0", integer=True, positive=True), sympy.Symbol("s1", integer=True, positive=True)
    assert FloorDiv(s**2, s) == s
    assert FloorDiv(2 * s * t, s) == 2 * t
    assert isinstance(FloorDiv(s, t), FloorDiv)  # not a multiple: kept
    assert isinstance(FloorDiv(s + 1, s), FloorDiv)


def test_multiples_of_the_modulus_stay_when_the_rest_may_be_negative():
    """ModularIndexing takes a non-negative base: `4 - s % 4` (Python's `(-s) % 4`, shifted to be
    non-negative) must not lose its 4, which left `-(s % 4) % 4`, a negative `%` in C's semantics
    in the kernels (a padded size came out as s - s % 4)."""
    s = size_symbol("s0")
    shifted = ModularIndexing(4 - ModularIndexing(s, 4), 4)
    assert shifted.args[0] == 4 - ModularIndexing(s, 4)
    assert ModularIndexing(4 * s + ModularIndexing(s, 4), 4) == ModularIndexing(s, 4)  # still dropped


def test_a_renamed_index_keeps_its_bound():
    from pipec_ir.symbolic import renamed_index

    j = bounded_index("j0", 16)
    r = renamed_index(j, "operand1")
    assert r != j and FloorDiv(16 * index_symbol("a") + r, 16) == index_symbol("a")
    assert renamed_index(index_symbol("i"), "k") == index_symbol("k")


def test_renamed_refs_reach_into_nested_arguments():
    from pipec_ir import Ref, ref_names, renamed_refs

    args = (("args", (Ref("a"), 2, (Ref("b"), Ref("a")))), ("kwargs", (("mask", Ref("c")),)))
    out = renamed_refs(args, {"a": "x", "c": "z"})
    assert list(ref_names(out)) == ["x", "b", "x", "z"] and out[0][1][1] == 2


def test_integer_square_root_parses_prints_and_bounds():
    """IntSqrt (IR 1.9): a model's `int(n ** 0.5)` of a size. It survives the text form, prints as
    Python's `isqrt` (host code; Triton kernels take it as a size parameter), keeps the root of a
    product of squares, and bounds like the root it is."""
    import math

    from pipec_ir.symbolic import IntSqrt, expr_str, parse_expr, pyexpr

    s0, s1 = size_symbol("s0"), size_symbol("s1")
    side = IntSqrt(FloorDiv(s0, 2) * FloorDiv(s1, 2))
    assert parse_expr(expr_str(side)) == side and parse_expr(expr_str(2 * side + 1)) == 2 * side + 1
    printed = pyexpr(side * 2)
    assert "isqrt(" in printed
    assert eval(printed, {"isqrt": math.isqrt, "s0": 30, "s1": 30}) == 2 * 15  # noqa: S307
    assert eval(pyexpr(side), {"isqrt": math.isqrt, "s0": 16, "s1": 36}) == math.isqrt(8 * 18)  # noqa: S307
    assert IntSqrt(s0 ** 2) == s0 and IntSqrt(9 * s0 ** 2 * s1 ** 4) == 3 * s0 * s1 ** 2
    assert IntSqrt(sympy.Integer(48)) == 6 and isinstance(IntSqrt(2 * s0 ** 2), IntSqrt)
    assert upper_bound(IntSqrt(bounded_index("x", 101))) == 10 and upper_bound(side) is None
