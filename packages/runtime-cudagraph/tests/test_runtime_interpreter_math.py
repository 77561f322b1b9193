"""What Triton's interpreter gets wrong, fixed for the kernels the runtime loads into it
(interpreter_math): libdevice calls and bf16 `tl.dot`."""

from __future__ import annotations

import math

import pytest
import torch

from pipec_ir import LaunchConfig, TritonKernel

from pipec_runtime_cudagraph.interpreter import interpreter_scope
from pipec_runtime_cudagraph.interpreter_math import LIBDEVICE
from pipec_runtime_cudagraph.kernels import load_kernel

# The runtime interprets only where there is no CUDA device (interpreter.py): forcing the
# interpreter on a GPU host leaves triton.language patched (triton < 3.7) and every later GPU
# compile in the process fails ("'ir.value' object has no attribute 'dtype'": 41 tests of one
# H200 run after these). These fixes are for CPU-only hosts, so they are tested there.
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter fixes, tested on CPU-only hosts")

UNARY_SOURCE = '''\
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def {name}(in_ptr0, out_ptr0, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(in_ptr0 + offsets, mask=mask)
    tl.store(out_ptr0 + offsets, libdevice.{fn}(x), mask=mask)
'''

BINARY_SOURCE = '''\
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def {name}(in_ptr0, in_ptr1, out_ptr0, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(in_ptr0 + offsets, mask=mask)
    y = tl.load(in_ptr1 + offsets, mask=mask)
    # a 2-D operand against a 1-D one: the result broadcasts as Triton's would
    z = libdevice.{fn}(x[:, None], y[None, :])
    tl.store(out_ptr0 + offsets[:, None] * BLOCK + offsets[None, :], z, mask=mask[:, None] & mask[None, :])
'''

DOT_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def {name}(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    acc = tl.zeros((M, N), dtype=tl.float32)
    acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))
'''

EDGES = [0.0, -0.0, 1e-30, -1e-30, 1e-7, -1e-7, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, 0.999999, -0.999999,
         10.0, -10.0, 88.0, 89.0, -89.0, 100.0, 1e30, -1e30, math.inf, -math.inf, math.nan]

# libdevice name -> (float64 reference, inputs): the float64 answer rounded to float32 is what
# the GPU's libdevice gives within an ulp or two (eager's vectorized sinh/cosh overflow at 89)
UNARY = {
    "expm1": torch.expm1, "log1p": torch.log1p, "tan": torch.tan, "atan": torch.atan, "asin": torch.asin,
    "acos": torch.acos, "sinh": torch.sinh, "cosh": torch.cosh, "nearbyint": torch.round, "trunc": torch.trunc,
}
BINARY = {"pow": torch.pow, "atan2": torch.atan2, "fmod": torch.fmod}


def _kernel(template: str, name: str, fn: str) -> TritonKernel:
    return TritonKernel(name=name, source=template.format(name=name, fn=fn), args=(), sizes=(), grid=(),
                        configs=(LaunchConfig(constants=(), num_warps=4, num_stages=1),))


def _unary_inputs() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.cat([torch.tensor(EDGES), torch.randn(30) * 3, torch.rand(8) * 2 - 1])


@pytest.mark.parametrize("fn", sorted(UNARY))
def test_libdevice_unary_runs_in_the_interpreter(fn, tmp_path):
    kernel = load_kernel(_kernel(UNARY_SOURCE, f"unary_{fn}", fn), interpret=True, cache_dir=tmp_path)
    x = _unary_inputs()
    out = torch.empty_like(x)
    with interpreter_scope(True):
        kernel[(1,)](x, out, x.numel(), BLOCK=64)
    torch.testing.assert_close(out, UNARY[fn](x.double()).float(), equal_nan=True)


@pytest.mark.parametrize("fn", sorted(BINARY))
def test_libdevice_binary_runs_in_the_interpreter(fn, tmp_path):
    kernel = load_kernel(_kernel(BINARY_SOURCE, f"binary_{fn}", fn), interpret=True, cache_dir=tmp_path)
    x = torch.tensor([0.0, -0.0, 2.0, -2.0, 0.5, -8.0, 3.0, 1e30, math.inf, -math.inf, math.nan, 1.0, -1.0, 7.5])
    out = torch.empty(16, 16)
    with interpreter_scope(True):
        kernel[(1,)](x, x, out, x.numel(), BLOCK=16)
    n = x.numel()
    expected = BINARY[fn](x.double()[:, None], x.double()[None, :]).float()
    torch.testing.assert_close(out[:n, :n], expected, equal_nan=True)


def test_every_stand_in_is_tested_here():
    assert set(UNARY) | set(BINARY) == set(vars(LIBDEVICE))


def test_a_bf16_operand_is_refused_as_on_the_gpu(tmp_path):
    kernel = load_kernel(_kernel(UNARY_SOURCE, "unary_bf16", "sinh"), interpret=True, cache_dir=tmp_path)
    x = torch.randn(8).bfloat16()
    with interpreter_scope(True), pytest.raises(Exception, match="libdevice.sinh: a bfloat16 operand"):
        kernel[(1,)](x, torch.empty_like(x), 8, BLOCK=8)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_half_dot_in_the_interpreter_matches_an_fp32_product(dtype, tmp_path):
    kernel = load_kernel(_kernel(DOT_SOURCE, "dot16", ""), interpret=True, cache_dir=tmp_path)
    torch.manual_seed(0)
    a, b = torch.randn(16, 32).to(dtype), torch.randn(32, 16).to(dtype)
    out = torch.empty(16, 16)
    with interpreter_scope(True):
        kernel[(1,)](a, b, out, M=16, N=16, K=32)
    torch.testing.assert_close(out, a.float() @ b.float())


def test_fp32_to_bf16_in_the_interpreter_rounds_to_nearest_even(tmp_path):
    kernel = load_kernel(_kernel(DOT_SOURCE, "dot16", ""), interpret=True, cache_dir=tmp_path)
    torch.manual_seed(1)
    a, b = torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()
    out = torch.empty(16, 16, dtype=torch.bfloat16)
    with interpreter_scope(True):
        kernel[(1,)](a, b, out, M=16, N=16, K=16)
    # torch rounds to nearest even: bit for bit (truncation differs in about half the elements)
    assert torch.equal(out, (a.float() @ b.float()).bfloat16())


def test_a_scalar_argument_is_a_loop_bound():
    """A kernel argument bounding a `range` (the GEMM template's K loop) reaches `__index__` as
    a 1-element array; triton 3.6's interpreter took `int()` of it, which numpy >= 2.4 refuses."""
    import numpy as np
    from triton.runtime import interpreter

    from pipec_runtime_cudagraph.interpreter_math import patch_interpreter

    patch_interpreter()

    class Scope:
        def __init__(self):
            self.set = {}

        def set_attr(self, obj, name, value):
            self.set[name] = value

    class Handle:
        data = np.array([7], dtype=np.int32)

    scope = Scope()
    interpreter._patch_lang_tensor(type("T", (), {}), scope)
    assert scope.set["__index__"](type("V", (), {"handle": Handle()})()) == 7
