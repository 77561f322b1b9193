"""Extern targets this runtime provides beyond ATen (docs/IR.md, "Choice groups").

`pipec.addmm_gelu_tanh(bias, a, b)` is `gelu(addmm(bias, a, b), approximate="tanh")`. On CUDA it
is one cuBLASLt call with the bias + GELU epilogue (`aten._addmm_activation(use_gelu=True)`,
whose GELU is the tanh approximation there); elsewhere the two ATen ops, because the CPU
kernel of `_addmm_activation` applies the exact GELU instead.

`pipec.mm_padded(a, b)` is `mm(a, b)`. On CUDA, a large half-precision product with M, N or K
not a multiple of 8 runs on operands padded with zeros to multiples of 8, and the result is
sliced back: cuBLAS's fast kernels need 16-byte aligned rows, and without them it falls back
to kernels several times slower: GPT-2's vocabulary (50257) made the LM head's backward GEMMs
a third of a training step (docs/performance.md, "Padding half-precision GEMMs").
"""

from __future__ import annotations

import torch

_LIBRARY = torch.library.Library("pipec", "DEF")
_LIBRARY.define("addmm_gelu_tanh(Tensor bias, Tensor a, Tensor b) -> Tensor")
_LIBRARY.define("mm_padded(Tensor a, Tensor b) -> Tensor")

# Pad only a product this large (multiply-adds), and only while the padded copies are small
# next to it: at least this many multiply-adds per element copied.
PAD_MIN_MACS = 1 << 30
PAD_MACS_PER_COPIED = 64


def _addmm_gelu_tanh_cuda(bias, a, b):
    return torch.ops.aten._addmm_activation.default(bias, a, b, use_gelu=True)


def _addmm_gelu_tanh_any(bias, a, b):
    return torch.nn.functional.gelu(torch.addmm(bias, a, b), approximate="tanh")


def _padded(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """`t` with `rows` zero rows and `cols` zero columns appended, keeping a transposed operand
    transposed (cuBLAS reads either layout; padding a transposed view row-major would transpose it)."""
    if not rows and not cols:
        return t
    if not t.is_contiguous() and t.t().is_contiguous():
        return torch.nn.functional.pad(t.t(), (0, rows, 0, cols)).t()
    return torch.nn.functional.pad(t, (0, cols, 0, rows))


def _mm_padded_cuda(a, b):
    m, k = a.shape
    n = b.shape[1]
    pm, pk, pn = -m % 8, -k % 8, -n % 8
    copied = (a.numel() if pm or pk else 0) + (b.numel() if pk or pn else 0)
    if not (pm or pk or pn) or m * n * k < PAD_MIN_MACS or copied * PAD_MACS_PER_COPIED > m * n * k:
        return torch.mm(a, b)
    out = torch.mm(_padded(a, pm, pk), _padded(b, pk, pn))
    return out[:m, :n].contiguous() if pn else out[:m]


_LIBRARY.impl("mm_padded", _mm_padded_cuda, "CUDA")
_LIBRARY.impl("mm_padded", lambda a, b: torch.mm(a, b), "CompositeExplicitAutograd")
_LIBRARY.impl("addmm_gelu_tanh", _addmm_gelu_tanh_cuda, "CUDA")
_LIBRARY.impl("addmm_gelu_tanh", _addmm_gelu_tanh_any, "CompositeExplicitAutograd")


# pipec.fft_{r2c,c2c,c2r}_pairs (IR 1.8): ATen's FFTs with their complex sides held as real pairs
# (the last dim: real, imaginary), as capture hands them over (docs/IR.md, "FFTs on real pairs").
# The capture stage may have declared them already (their schemas and shapes, to trace them).
def _complex_of(z):
    return torch.view_as_complex(z.contiguous())


def _fft_r2c_pairs(x, dim, normalization, onesided):
    return torch.view_as_real(torch.ops.aten._fft_r2c.default(x, dim, normalization, onesided))


def _fft_c2c_pairs(z, dim, normalization, forward):
    return torch.view_as_real(torch.ops.aten._fft_c2c.default(_complex_of(z), dim, normalization, forward))


def _fft_c2r_pairs(z, dim, normalization, last_dim_size):
    return torch.ops.aten._fft_c2r.default(_complex_of(z), dim, normalization, last_dim_size)


_FFT_SIGNATURES = {
    "fft_r2c_pairs": ("Tensor x, int[] dim, int normalization, bool onesided", _fft_r2c_pairs),
    "fft_c2c_pairs": ("Tensor z, int[] dim, int normalization, bool forward", _fft_c2c_pairs),
    "fft_c2r_pairs": ("Tensor z, int[] dim, int normalization, SymInt last_dim_size", _fft_c2r_pairs),
}
for _name, (_args, _fn) in _FFT_SIGNATURES.items():
    if not hasattr(torch.ops.pipec, _name):
        _LIBRARY.define(f"{_name}({_args}) -> Tensor")
    _LIBRARY.impl(_name, _fn, "CompositeExplicitAutograd")

# What a specialized run (specialize.py) calls instead of a pipec.* target on one device type:
# (ATen overload, extra keyword arguments). Through the dispatcher and the Python impl above the
# call costs host time the ATen op does not (docs/performance.md, "Calling ATen directly").
DIRECT = {
    ("pipec.addmm_gelu_tanh.default", "cuda"): (torch.ops.aten._addmm_activation.default, (("use_gelu", True),)),
}


def direct_call(target: str, device_type: str):
    """(ATen overload, extra kwargs) that computes `target` on this device type, or None."""
    return DIRECT.get((target, device_type))


# ATen overloads a specialized run calls through torch's generated Python bindings (`torch.mm`,
# what Inductor's `extern_kernels.mm` is) instead of the overload's own entry (`OpOverload._op`),
# which parses its arguments against the schema in Python-facing C++: 1-3 us more per call on a
# 2-core host, and a BERT base training step makes ~330 such calls (docs/performance.md,
# "Session 18"); ResNet-50's 53 convolutions took 23.8 us each through `_op` on an H100's host,
# Inductor's 19.3 through `torch.convolution` (benchmarks/results/resnet_host_h100_s46.txt).
# Each binding takes the overload's arguments in its order and names, reaches that same
# overload, and is checked against it in tests/test_runtime_launch.py.
_VF = torch._C._VariableFunctions
PYTHON_BINDINGS = {
    "aten.mm.default": _VF.mm, "aten.bmm.default": _VF.bmm, "aten.addmm.default": _VF.addmm,
    "aten.baddbmm.default": _VF.baddbmm, "aten._addmm_activation.default": _VF._addmm_activation,
    "aten.permute.default": _VF.permute, "aten.reshape.default": _VF.reshape, "aten.t.default": _VF.t,
    "aten.transpose.int": _VF.transpose, "aten.unsqueeze.default": _VF.unsqueeze, "aten.squeeze.dim": _VF.squeeze,
    "aten.select.int": _VF.select, "aten.narrow.default": _VF.narrow, "aten.as_strided.default": _VF.as_strided,
    "aten.clone.default": _VF.clone, "aten.cat.default": _VF.cat, "aten.convolution.default": _VF.convolution,
    "aten.view.default": torch.Tensor.view, "aten.expand.default": torch.Tensor.expand,
}


def python_binding(target: str):
    """torch's Python binding computing the ATen overload `target`, or None."""
    return PYTHON_BINDINGS.get(target)


# ATen CPU kernels that misplace values when the index is an expanded view: with torch 2.13,
# `x.scatter_add(0, idx, src)` for idx of strides (1, 0, 0) changed elements outside the
# scattered positions (scatter_reduce too; scatter and gather are right). pipec calls them as
# externs when it cannot lower them (a symbolic size), so it reads a materialized index.
DENSE_INDEX_TARGETS = frozenset({"aten.scatter_add.default", "aten.scatter_reduce.two"})


class DenseIndexCall:
    """`op(self, dim, index, ...)` with a non-contiguous CPU `index` made contiguous first."""

    def __init__(self, op):
        self.op = op
        self._schema = op._schema  # what specialize.py reads of an overload

    def __call__(self, x, dim, index, *rest, **kwargs):
        if index.device.type == "cpu" and not index.is_contiguous():
            index = index.contiguous()
        return self.op(x, dim, index, *rest, **kwargs)


def guarded(target: str, op):
    """`op`, or the call that works around a known ATen bug for `target`."""
    return DenseIndexCall(op) if target in DENSE_INDEX_TARGETS else op


__all__ = ["DENSE_INDEX_TARGETS", "PYTHON_BINDINGS", "DenseIndexCall", "direct_call", "guarded", "python_binding"]
