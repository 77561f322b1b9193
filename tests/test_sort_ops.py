"""torch.sort as generated code: ranks from a pairwise comparison (one reduction kernel) and a
scatter to the ranks (pipec_capture.decompositions.sort). Values and indices must equal eager's
exactly (the inputs have no ties except where eager's order is the stable one too)."""

import warnings

import pytest
import torch

import pipec

g = torch.Generator().manual_seed(3)
X = torch.randn(4, 6, 5, generator=g)
X_NAN = X.clone()
X_NAN[1, 2, 3] = X_NAN[2, 0, 0] = float("nan")
INTS = torch.randperm(120, generator=g).view(4, 6, 5) - 60  # distinct integers


@pytest.mark.parametrize("x", [X, X_NAN, INTS], ids=["float", "nan", "int"])
@pytest.mark.parametrize("dim,descending", [(-1, False), (1, True), (0, False), (-3, True)])
def test_sort_matches_eager_and_is_generated(x, dim, descending):
    def f(t):
        values, indices = torch.sort(t * 2, dim=dim, descending=descending)
        return values + 1, indices

    got_values, got_indices = pipec.compile(f)(x)
    want_values, want_indices = f(x)
    torch.testing.assert_close(got_values, want_values, equal_nan=True)
    assert torch.equal(got_indices, want_indices)
    assert pipec.explain(f, x).extern_ops == {}


def test_stable_sort_keeps_the_order_of_ties():
    x = torch.tensor([[3.0, 1.0, 3.0, 2.0, 1.0, 3.0]])
    for descending in (False, True):
        f = lambda t, d=descending: torch.sort(t, stable=True, descending=d)  # noqa: E731
        got, want = pipec.compile(f)(x), f(x)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("op", ["sort", "topk"])
def test_long_rows_are_one_library_call(op):
    """A row over SORT_MAX_ROW is ATen's kernel (radix sort / radix select), as Inductor calls it:
    a library call, so no fallback warning, allowed under fullgraph; the math around it is generated."""
    from pipec_capture.decompositions import SORT_MAX_ROW

    x = torch.randn(2, SORT_MAX_ROW + 1, generator=g)
    if op == "sort":
        f = lambda t: torch.sort(t * 2)[0] + 1  # noqa: E731
    else:
        f = lambda t: torch.topk(t * 2, 5).values + 1  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        got = pipec.compile(f, fullgraph=True)(x)
        report = pipec.explain(f, x)
    torch.testing.assert_close(got, f(x))
    assert report.extern_ops == {f"aten.{op}.default": "library"}, report.extern_ops
    assert any(k["runs_as"] == "Triton" for gr in report.graphs for k in gr["kernels"])


@pytest.mark.parametrize("largest,is_sorted", [(True, True), (False, True), (True, False)])
def test_topk_is_atens_kernel_and_picks_eagers_indices_among_ties(largest, is_sorted):
    """topk is always ATen's kernel (a library call: no warning, allowed under fullgraph), so
    among equal values it picks the indices eager picks: a router whose scores tie routes as eager
    does. The rank sort's topk (the earliest index first) picked others (doge, afmoe)."""
    x = torch.tensor([[3.0, 1.0, float("nan"), 3.0, -2.0, 0.5, 3.0]]).repeat(3, 1) * torch.tensor([[1.0], [2.0], [-1.0]])
    ties = torch.tensor([[0.5, 0.0, 0.0, 0.0, 0.0, 0.0]])  # a zero-initialized gate's scores

    def f(t):
        values, indices = torch.topk(t + 0, 3, dim=1, largest=largest, sorted=is_sorted)
        return values * 2, indices

    for t in (x, ties):
        with warnings.catch_warnings():
            warnings.simplefilter("error", pipec.PipecFallbackWarning)
            values, indices = pipec.compile(f, fullgraph=True)(t)
        want_values, want_indices = f(t)
        torch.testing.assert_close(values, want_values, equal_nan=True)
        assert torch.equal(indices, want_indices)
    assert pipec.explain(f, x).extern_ops == {"aten.topk.default": "library"}
