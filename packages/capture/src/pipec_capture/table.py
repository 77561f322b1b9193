"""The lowering table: ATen overload name -> lowering (a leaf: nothing of the package imported).

`LOWERINGS` is keyed by ATen overload name (`str(node.target)`, e.g. "aten.add.Tensor"). A
lowering receives the `GraphBuilder` (builder.py) it emits into, the fx node and the node's
arguments with every tensor replaced by a `pipec_ir.Ref` to its IR value, and returns the IR
value(s) of the result: a `Ref`, a tuple of `Ref`s (multi-result ops such as
native_layer_norm), or a plain Python value (symbolic sizes). A lowering may emit many IR
nodes and may raise `NoLowering` to fall back to an `extern` node for that op.

The family modules (`lower_*.py`) add their rows with `register` when imported; `lowerer.py`
imports them all, so the table is complete whenever the package is imported.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

Lowering = Callable[..., Any]

LOWERINGS: dict[str, Lowering] = {}


def register(*names: str):
    """A decorator adding the function as the lowering of every overload in `names`."""
    def deco(fn):
        for n in names:
            LOWERINGS[n] = fn
        return fn
    return deco


class NoLowering(Exception):
    """Raised by a lowering that cannot handle this particular call: the op becomes an extern."""



# Ops for which a vendor library is the right answer: extern with reason "library".
LIBRARY_OPS = frozenset({
    "convolution", "_convolution", "convolution_backward", "cudnn_convolution",
    "cudnn_convolution_transpose", "mkldnn_convolution", "miopen_convolution",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "matmul", "linear",
    "_int_mm", "_scaled_mm", "_addmm_activation",
    "scaled_dot_product_attention", "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention_backward",
    "_flash_attention_forward", "_flash_attention_backward",
    "_efficient_attention_forward", "_efficient_attention_backward",
    # torch's own check of data (one_hot's "index in range"): torch's kernel raises as eager does,
    # on the device, without a synchronization
    "_assert_async",
    # FFTs (cuFFT on CUDA), on complex values held as real pairs (complex_pairs.py, IR 1.8)
    "fft_r2c_pairs", "fft_c2c_pairs", "fft_c2r_pairs",
    # dense linear algebra (cuBLAS / cuSOLVER / MAGMA on CUDA, LAPACK on the CPU): solves and
    # factorizations are sequential pivoting or iteration, which a pointwise or reduction kernel
    # cannot express; Inductor calls the same ATen kernels. The triangular solves are the
    # chunked gated-delta rule of Qwen3-Next, Qwen3.5 and OLMo-hybrid.
    "linalg_solve_triangular", "triangular_solve", "linalg_cholesky_ex", "cholesky", "cholesky_solve",
    "_cholesky_solve_helper", "cholesky_inverse", "linalg_inv_ex", "_linalg_solve_ex", "linalg_lu",
    "linalg_lu_factor_ex", "linalg_lu_solve", "lu_unpack", "linalg_ldl_factor_ex", "linalg_ldl_solve",
    "_linalg_svd", "_linalg_eigh", "linalg_eig", "_linalg_eigvals", "linalg_qr", "geqrf", "ormqr",
    "linalg_householder_product", "_linalg_det", "_linalg_slogdet", "linalg_pinv", "linalg_lstsq",
    # the check of those factorizations' `info` (torch.linalg.inv's "singular matrix" error): torch
    # raises as eager does (it reads `info` on the host; a CUDA Graph capture leaves such a program
    # to plain launches)
    "_linalg_check_errors",
    # sorts that decompositions.sort leaves alone: rows over SORT_MAX_ROW (its rank sort compares
    # every pair of a row), symbolic lengths, bool and complex values. ATen's segmented radix sort
    # is the right answer there, and Inductor calls it too.
    "sort",
    # topk, always: among equal values ATen's kernels (a radix select on CUDA, a partial sort on the
    # CPU) pick in an order torch leaves unspecified, and a mixture-of-experts router whose scores
    # tie (a gate initialized to zero, relu'd indexer scores) then routes to other experts than
    # eager's, so the model's outputs differ from eager's. Inductor calls ATen's topk as well. The
    # rank sort's topk (the earliest index among ties) did so on doge, afmoe, glm_moe_dsa and
    # deepseek_v32 (session 49's sixth sweep batch).
    "topk",
})

def op_name(target) -> str:
    """The overload name used as the lowering-table key: "aten.add.Tensor"."""
    if target is operator.getitem:
        return "getitem"
    return str(target)


def base_name(target: str) -> str:
    """"aten.convolution.default" -> "convolution"."""
    parts = target.split(".")
    return parts[1] if len(parts) >= 2 else target


# The extern reason of an op a library registered through torch.library (its own namespace:
# transformers' `grouped_mm_fallback`, torchvision's `nms`, a user's op): opaque by its
# author's design, as a vendor library call is, so it runs through torch without a warning
# (and is allowed under fullgraph); `explain` lists it.
CUSTOM_OP = "custom op"
# torch's own namespaces: an op of these with no lowering is pipec's gap, and is warned about
TORCH_NAMESPACES = frozenset({
    "aten", "prims", "rngprims", "debugprims", "quantized", "_quantized", "mkldnn", "onednn",
    "_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "c10d", "_dtensor",
    "profiler", "inductor", "higher_order",
})


def extern_reason(target: str) -> str:
    if base_name(target) in LIBRARY_OPS:
        return "library"
    if target.split(".")[0] not in TORCH_NAMESPACES:
        return CUSTOM_OP
    return f"no lowering for {target}"
