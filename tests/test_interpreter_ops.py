"""Every path pipec compiles runs correctly in Triton's CPU interpreter: bf16 GEMMs (the
interpreter's bf16 `tl.dot` multiplied bit patterns) and the ops whose kernels call libdevice
(which the interpreter cannot run). On the GPU the same kernels use tl.dot and libdevice."""

from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import pipec

_EDGES = [0.0, -0.0, 1e-30, 1e-7, -1e-7, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, 0.999, -0.999,
          30.0, -30.0, 89.0, -89.0, 100.0, 1e30, -1e30, math.inf, -math.inf, math.nan]


def _inputs(scale: float = 3.0) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.cat([torch.tensor(_EDGES), torch.randn(24) * scale])


# op -> function of (x, y); inputs are the edge values above plus random ones
OPS = {
    "sinh": lambda x, y: torch.sinh(x),
    "cosh": lambda x, y: torch.cosh(x),
    "asin": lambda x, y: torch.asin(x),  # |x| > 1: nan
    "acos": lambda x, y: torch.acos(x),
    "atan": lambda x, y: torch.atan(x),
    "tan": lambda x, y: torch.tan(x),
    "atan2": lambda x, y: torch.atan2(x, y),
    "expm1": lambda x, y: torch.expm1(x),
    "log1p": lambda x, y: torch.log1p(x),  # x < -1: nan, x = -1: -inf
    "pow": lambda x, y: torch.pow(x, y),  # negative base, fractional exponent: nan
    "round": lambda x, y: torch.round(x),  # half to even
    "trunc": lambda x, y: torch.trunc(x),
    "fmod": lambda x, y: torch.fmod(x, y),
    "softplus": lambda x, y: F.softplus(x),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_libdevice_op_matches_eager_in_the_interpreter(name):
    f = OPS[name]
    x = _inputs()
    y = torch.flip(_inputs(2.0), [0])
    out = pipec.compile(f)(x, y)
    # the float64 answer rounded: eager's vectorized float32 sinh/cosh overflow at 89 (2.2e38
    # fits in float32), libdevice's do not; elsewhere eager agrees with it, checked too
    torch.testing.assert_close(out, f(x.double(), y.double()).float(), equal_nan=True)
    finite = x.abs() < 80
    torch.testing.assert_close(out[finite], f(x, y)[finite], equal_nan=True)


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs the GPU machine"))])
def test_integer_division_rounds_as_torch_does_for_every_sign(device):
    """Triton's integer `//` and `%` truncate toward zero, as C's do: floor division fixes up the
    quotient, truncating division (JetMoE's router, `index.div(top_k, rounding_mode="trunc")`)
    takes the floor quotient of `a - fmod(a, b)`, an exact multiple of b. On the GPU the compiled
    kernel's integer ops are checked, not the interpreter's emulation of them."""
    a = torch.arange(-9, 10, device=device)
    b = torch.tensor([3, -3, 4, -4, 1, -1, 7] * 3, device=device)[:a.numel()]

    def f(a, b):
        return (torch.div(a, b, rounding_mode="trunc"), torch.div(a, b, rounding_mode="floor"),
                torch.div(a, 4, rounding_mode="trunc"), a // -2, torch.fmod(a, b), torch.remainder(a, b))

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="pipec")  # no extern call
        results = pipec.compile(f)(a, b)
    for got, expected in zip(results, f(a, b)):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_every_libdevice_function_codegen_emits_runs_in_the_interpreter():
    from pipec_codegen_triton.pointwise_ops import NEEDS_LIBDEVICE, POINTWISE
    from pipec_runtime_cudagraph.interpreter_math import LIBDEVICE

    class FloatNode:  # what a template reads of its node
        type = type("TensorType", (), {"dtype": "float32"})()

        def attr(self, key, default=None):
            return {"distribution": "uniform", "offset": 0}.get(key, default)

    emitted = set()
    for op, template in POINTWISE.items():
        operands = ["a", "b", "c"][:template.__code__.co_argcount - 1]
        names = set(re.findall(r"libdevice\.(\w+)", template(FloatNode(), *operands)))
        assert bool(names) == (op in NEEDS_LIBDEVICE), op
        emitted |= names
    assert emitted <= set(vars(LIBDEVICE))


@pytest.fixture()
def bf16_linear():
    torch.manual_seed(0)
    return torch.nn.Linear(64, 64).to(torch.bfloat16), torch.randn(8, 64, dtype=torch.bfloat16)


def test_bf16_linear_pipec_compile(bf16_linear):
    model, x = bf16_linear
    with torch.no_grad():
        torch.testing.assert_close(pipec.compile(model)(x), model(x))


def test_bf16_linear_torch_compile_backend(bf16_linear):
    model, x = bf16_linear
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="pipec")(x), model(x))


def test_linear_under_bf16_autocast():
    torch.manual_seed(0)
    model, x = torch.nn.Linear(64, 64), torch.randn(8, 64)
    compiled = pipec.compile(model)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = compiled(x), model(x)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected)


def test_compiled_adamw_step_on_the_cpu():
    # AdamW's foreach step divides by (1 - beta ** step): pow of two tensors (libdevice)
    torch.manual_seed(0)
    params = [torch.randn(4, requires_grad=True) for _ in range(2)]
    twins = [p.detach().clone().requires_grad_() for p in params]
    for p, t in zip(params, twins):
        p.grad = torch.randn(4)
        t.grad = p.grad.clone()
    opt, eager_opt = torch.optim.AdamW(params, lr=0.1), torch.optim.AdamW(twins, lr=0.1)
    step = torch.compile(opt.step, backend="pipec")
    for _ in range(2):
        step()
        eager_opt.step()
    for p, t in zip(params, twins):
        torch.testing.assert_close(p, t)


def test_ieee_specials_raise_no_numpy_warnings():
    """The interpreter computes with numpy, which warns on overflow, division by zero and NaN
    results; the GPU and eager torch do not. A padding mask (finfo.min + finfo.min) or a log of
    zero gives eager's values with no RuntimeWarning (the runtime's `ieee_quiet`)."""
    import warnings

    low = torch.finfo(torch.float32).min

    def masked(scores, mask, y):
        return scores + mask * low + low, torch.log(y) / y, torch.sqrt(y - 1)

    torch.manual_seed(0)
    args = (torch.full((4, 8), low), torch.ones(4, 8), torch.tensor([0.0, 1.0, 2.0, 0.0]))
    compiled = pipec.compile(masked)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compiled(*args)
    numpy_noise = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)
                   and "encountered" in str(w.message)]
    assert numpy_noise == []
    for g, want in zip(got, masked(*args)):
        torch.testing.assert_close(g, want, equal_nan=True)
