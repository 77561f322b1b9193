"""cumsum / cumprod / logcumsumexp end to end (pipec.compile): generated scan kernels, not
extern fallbacks, equal to eager. On CPU the kernels run in Triton's interpreter (tiny shapes);
the GPU test checks half-precision accuracy on a long row."""

import pytest
import torch

import pipec


def compiled(fn, *xs, **options):
    report = pipec.explain(fn, *xs, **options)
    assert not report.extern_ops, report.extern_ops
    torch._dynamo.reset()
    return pipec.compile(fn, **options)(*xs)


def close(got, expected, **tol):
    got = got if isinstance(got, (tuple, list)) else (got,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, equal_nan=True, **tol)


def test_cumsum_with_prologue_and_epilogue_is_one_kernel():
    def f(x):
        return torch.cumsum(x.exp(), -1) * 0.5

    x = torch.randn(5, 13)  # rows not a power of two
    report = pipec.explain(f, x)
    assert report.kernel_count == 1 and report.fusion_count == 1 and not report.extern_ops
    torch._dynamo.reset()
    close(pipec.compile(f)(x), f(x))


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_every_dim_of_a_3d_tensor(dim):
    def f(x):
        return torch.cumsum(x, dim), torch.cumprod(1 + 0.1 * x, dim), torch.logcumsumexp(x * 10, dim)

    x = torch.randn(3, 6, 5)
    close(compiled(f, x), f(x))


def test_long_row_walks_blocks():
    def f(x):
        return torch.cumsum(x, 1), torch.logcumsumexp(x, 1)

    x = torch.randn(1, 2100)  # three blocks of the looped row's RBLOCK (1024), the last one ragged
    close(compiled(f, x, persistent_reduction_limit=0), f(x), rtol=1e-5, atol=1e-4)


def test_long_column_walks_blocks():
    def f(x):
        return torch.cumsum(x, 0)

    x = torch.randn(150, 3)  # a scan down the columns: RBLOCK 64 rows per step
    close(compiled(f, x), f(x), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("make", [
    lambda: torch.randint(-9, 9, (4, 7)),
    lambda: torch.randint(-9, 9, (4, 7), dtype=torch.int32),
    lambda: torch.rand(4, 7) > 0.5,
])
def test_integer_and_bool_inputs_give_int64(make):
    def f(x):
        return torch.cumsum(x, 1), torch.cumprod(x, 0)

    x = make()
    close(compiled(f, x), f(x))


def test_dtype_kwarg_and_float64():
    def f(x, d):
        return torch.cumsum(x, 1, dtype=torch.float64), torch.cumprod(d, 1), torch.cumsum(x, 0, dtype=torch.int32)

    x = torch.randn(4, 9) * 4
    close(compiled(f, x, x.double()), f(x, x.double()))


def test_dynamic_row_length():
    def f(x):
        return torch.cumsum(x, -1) + 1

    c = pipec.compile(f, dynamic=True)
    for n in (5, 11):
        x = torch.randn(3, n)
        close(c(x), f(x))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (half precision and long rows on the GPU)")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1])
def test_gpu_half_precision_long_rows(dtype, dim):
    """fp32 accumulation: no worse than eager against a float64 reference, on rows long
    enough for the block loop (and on columns)."""
    def f(x):
        return torch.cumsum(x, dim), torch.logcumsumexp(x, dim)

    torch.manual_seed(0)
    shape = (8, 50000) if dim == 1 else (20000, 24)
    x = torch.randn(shape, device="cuda").to(dtype)
    got = pipec.compile(f)(x)
    eager = f(x)
    reference = [r.to(dtype) for r in (torch.cumsum(x.double(), dim), torch.logcumsumexp(x.double(), dim))]
    for g, e, r in zip(got, eager, reference):
        ours = (g.double() - r.double()).abs().max().item()
        theirs = (e.double() - r.double()).abs().max().item()
        scale = r.double().abs().max().item()
        assert ours <= 1.5 * theirs + 2 * torch.finfo(dtype).eps * scale, (ours, theirs)
