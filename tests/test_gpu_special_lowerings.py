"""Session 48's lowerings compiled to Triton and run on a GPU, checked against eager there.

Their CPU tests check the decompositions and the IR through the reference interpreter; the
Triton interpreter cannot call libdevice and never checks bounds, so what rests on the GPU's own
math and memory is checked here:

* lgamma / digamma as arithmetic: their precision rests on the GPU's `log`, `nearbyint` and the
  polynomials, near the poles, for tiny and for huge arguments;
* cdist and its backward, for each p, on both sides of the 25-row switch to a matrix product;
* scatter_add / scatter_reduce at symbolic sizes (atomics at positions from size expressions);
* a cat whose part is sized by a difference of sizes (one scatter per part);
* arange sized by a size expression.
"""

import contextlib
import warnings

import pytest
import torch

import pipec

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (libdevice, bounds)")

SPECIAL = [0.0, -0.0, -1.0, -2.0, -2.5, 1e-8, -1e-8, 3e-4, -3.0001, -0.9999, 4.9999, 0.5, 1.0, 2.0, 30.0, -7.3, -100.5,
           1e6, 1e30, 1e-39, -1e-39, float("inf"), float("-inf"), float("nan")]


def _compiled(fn, **kwargs):
    """`fn` under torch.compile with pipec (nothing here may run eagerly or as an extern call)."""
    return torch.compile(fn, backend="pipec", **kwargs)


@contextlib.contextmanager
def no_fallback():
    """pipec's fallback warnings (an extern call, an eager graph) as errors, backward passes included."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        yield


def _arguments(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.tensor(SPECIAL), torch.randn(4000, generator=g) * 5, torch.rand(4000, generator=g) * 200,
                   torch.rand(1000, generator=g) * 1e-3, -torch.rand(1000, generator=g) * 30])
    return x.to(dtype).cuda()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("name", ["lgamma", "digamma"])
def test_gamma_functions_match_eager_on_the_gpu(name, dtype):
    op = getattr(torch, name)
    torch._dynamo.reset()
    x = _arguments(dtype)
    with no_fallback():
        got = _compiled(lambda t: op(t) * 1.0)(x)
    torch.testing.assert_close(got, op(x), equal_nan=True)


def test_lgamma_gradient_is_eagers():
    g = torch.Generator().manual_seed(1)
    x0 = (torch.rand(64, 33, generator=g) * 10 + 0.05).cuda()

    def f(x):
        return (torch.lgamma(x * 0.5 + 0.5) - torch.lgamma(x * 0.5)).sum()

    torch._dynamo.reset()
    x, ex = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    with no_fallback():
        out = _compiled(f)(x)
        out.backward()
    f(ex).backward()
    torch.testing.assert_close(out, f(x0))
    torch.testing.assert_close(x.grad, ex.grad)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, float("inf")])
@pytest.mark.parametrize("rows", [(5, 7), (40, 30)], ids=["direct", "matmul_rows"])
def test_cdist_and_its_gradient_match_eager(p, rows):
    g = torch.Generator().manual_seed(2)
    x1 = torch.randn(3, rows[0], 16, generator=g).cuda()
    x2 = torch.randn(3, rows[1], 16, generator=g).cuda()
    x2[:, 2] = x1[:, 2]  # a pair at distance 0: the backward's formulas divide there
    weight = torch.randn(3, rows[0], rows[1], generator=g).cuda()

    def f(a, b):
        return (torch.cdist(a, b, p=p) * weight).sum()

    torch._dynamo.reset()
    a, b = x1.clone().requires_grad_(), x2.clone().requires_grad_()
    ea, eb = x1.clone().requires_grad_(), x2.clone().requires_grad_()
    with no_fallback():
        out = _compiled(f)(a, b)
        out.backward()
    f(ea, eb).backward()
    torch.testing.assert_close(out, f(x1, x2), atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(a.grad, ea.grad, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(b.grad, eb.grad, atol=1e-3, rtol=1e-4)


SCATTERS = {
    "scatter_add": lambda x, s, i: torch.scatter_add(x, 0, i, s),
    "reduce_amax": lambda x, s, i: x.scatter_reduce(0, i, s, "amax"),
    "reduce_mean": lambda x, s, i: x.scatter_reduce(0, i, s, "mean", include_self=False),
}


@pytest.mark.parametrize("name", sorted(SCATTERS))
def test_scatters_at_symbolic_sizes(name):
    fn = SCATTERS[name]
    torch._dynamo.reset()
    compiled = _compiled(fn, dynamic=True)
    g = torch.Generator().manual_seed(3)
    for rows, cols in ((7, 3), (9, 8), (300, 65)):  # the last: many writes per line, atomics contend
        x, s = torch.randn(rows, cols, generator=g).cuda(), torch.randn(rows - 1, cols, generator=g).cuda()
        i = torch.randint(0, rows, (rows - 1, cols), generator=g).cuda()
        with no_fallback():
            got = compiled(x, s, i)
        # sums in another order: float32's tolerance over up to ~300 terms
        torch.testing.assert_close(got, fn(x, s, i), atol=1e-4, rtol=1e-4)


def test_a_cat_of_parts_sized_by_differences():
    """The middle part's size is a difference of sizes, so capture cannot prove it non-empty and
    writes the cat part by part (one scatter each). Dynamo's guards (sizes 0 and 1 specialized)
    give the calls where that part is empty, (4, 4) and (600, 600), a graph of their own; so the
    GPU checks the part-by-part writes at sizes 2 to 900 and the empty case's own graph, and the
    capture test (the reference interpreter) checks an empty part inside one graph."""
    def fn(a, b):
        return torch.cat([a * 2, b[: b.shape[0] - a.shape[0]] + 1, a], dim=0)

    torch._dynamo.reset()
    compiled = _compiled(fn, dynamic=True)
    g = torch.Generator().manual_seed(4)
    for rows_a, rows_b in ((3, 7), (4, 4), (2, 9), (600, 900), (600, 600)):
        a, b = torch.randn(rows_a, 5, generator=g).cuda(), torch.randn(rows_b, 5, generator=g).cuda()
        with no_fallback():
            got = compiled(a, b)
        torch.testing.assert_close(got, fn(a, b), atol=0, rtol=0)


def test_arange_sized_by_a_size_expression():
    def fn(x):
        return x + torch.arange(x.shape[0] * 2 - 3, device=x.device)[: x.shape[0]].unsqueeze(1)

    torch._dynamo.reset()
    compiled = _compiled(fn, dynamic=True)
    for rows in (4, 9, 33):
        x = torch.randn(rows, 3).cuda()
        with no_fallback():
            got = compiled(x)
        torch.testing.assert_close(got, fn(x), atol=0, rtol=0)
