"""What the OpInfo sweep expects of each op_db entry (tests/opinfo/test_opinfo.py checks it).

An entry not listed here must run as generated code with results equal to eager. A listed
entry says what it does instead and why:
- EXTERN: some op of it runs as an extern fallback (through PyTorch), with the reason;
- XFAIL: a stage fails on it (an expected failure), with the reason.
The table must stay true: an entry doing better than listed fails the test, so fix the row.
"""

from __future__ import annotations

EXTERN, XFAIL = "extern", "error"

EXPECTED: dict[str, tuple[str, str]] = {
    'argsort': (EXTERN, 'aten.sort.default: library: a row over 1024 elements (op_db has one of 8,000) is ATen\'s radix sort; shorter rows are generated'),
    'argwhere': (XFAIL, 'data-dependent output shape'),
    'cdouble': (XFAIL, "complex dtypes are not in pipec's IR"),
    'cfloat': (XFAIL, "complex dtypes are not in pipec's IR"),
    'chalf': (XFAIL, "complex dtypes are not in pipec's IR"),
    'combinations': (XFAIL, 'data-dependent output shape'),
    'fft.fft': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.fft2': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.fftn': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.hfft': (EXTERN, 'pipec.fft_*_pairs: library: a real result, the complex values inside held as pairs (IR 1.8)'),
    'fft.hfft2': (EXTERN, 'pipec.fft_*_pairs: library: a real result, the complex values inside held as pairs (IR 1.8)'),
    'fft.hfftn': (EXTERN, 'pipec.fft_*_pairs: library: a real result, the complex values inside held as pairs (IR 1.8)'),
    'fft.ifft': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.ifft2': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.ifftn': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.ihfft': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.ihfft2': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.ihfftn': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.irfft': (EXTERN, 'pipec.fft_*_pairs: library: a real result, the complex values inside held as pairs (IR 1.8)'),
    'fft.irfft2': (EXTERN, 'pipec.fft_*_pairs: library: a real result, the complex values inside held as pairs (IR 1.8)'),
    'fft.irfftn': (EXTERN, 'pipec.fft_*_pairs: library: a real result, the complex values inside held as pairs (IR 1.8)'),
    'fft.rfft': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.rfft2': (XFAIL, "complex dtypes are not in pipec's IR"),
    'fft.rfftn': (XFAIL, "complex dtypes are not in pipec's IR"),
    'index_put': (EXTERN, 'aten.index_put.default: a boolean mask index (data-dependent shape); integer indices are generated'),
    'inner': (EXTERN, 'aten.dot.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'linalg.cond': (EXTERN, 'aten._linalg_svd.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'linalg.matrix_norm': (EXTERN, 'aten._linalg_svd.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'linalg.matrix_rank': (EXTERN, 'aten._linalg_svd.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'linalg.matrix_rank.hermitian': (EXTERN, 'aten._linalg_eigh.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'linalg.norm': (EXTERN, 'aten._linalg_svd.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'linalg.norm.subgradients_at_zero': (EXTERN, 'aten._linalg_svd.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'linalg.pinv': (EXTERN, 'aten.linalg_pinv.atol_rtol_tensor: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'linalg.pinv.singular': (EXTERN, 'aten.linalg_pinv.atol_rtol_tensor: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'linalg.tensorinv': (XFAIL, 'an op with a non-tensor result (error check) cannot be compiled'),
    'linalg.tensorsolve': (XFAIL, 'an op with a non-tensor result (error check) cannot be compiled'),
    'logdet': (EXTERN, 'aten._linalg_slogdet.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'masked.median': (EXTERN, 'aten.nanmedian.dim: sorting: pipec has no sort kernel'),
    'msort': (EXTERN, 'aten.sort.default: library: a row over 1024 elements (op_db has one of 8,000) is ATen\'s radix sort; shorter rows are generated'),
    'nn.functional.bilinear': (EXTERN, 'aten._trilinear.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'nn.functional.conv1d': (EXTERN, 'aten.convolution.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'nn.functional.conv2d': (EXTERN, 'aten.convolution.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'nn.functional.conv3d': (EXTERN, 'aten.convolution.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'nn.functional.conv_transpose1d': (EXTERN, 'aten.convolution.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'nn.functional.conv_transpose2d': (EXTERN, 'aten.convolution.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'nn.functional.conv_transpose3d': (EXTERN, 'aten.convolution.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'nn.functional.ctc_loss': (XFAIL, 'data-dependent output shape'),
    'nn.functional.embedding_bag': (EXTERN, 'aten._embedding_bag_forward_only.default: scatter: writes to data-dependent positions; pipec generates no atomic scatter kernel yet'),
    'nn.functional.fractional_max_pool2d': (EXTERN, "aten.fractional_max_pool2d.default: window/resampling op: not lowered yet (windowed reads)"),
    'nn.functional.fractional_max_pool3d': (EXTERN, "aten.fractional_max_pool3d.default: window/resampling op: not lowered yet (windowed reads)"),
    'nn.functional.linear_cross_entropy.chunked': (EXTERN, 'torch_nn._linear_cross_entropy_batch_chunked.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'nn.functional.linear_cross_entropy.chunked_none': (EXTERN, 'torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'nn.functional.pdist': (EXTERN, 'aten._pdist_forward.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'nonzero': (XFAIL, 'data-dependent output shape'),
    'norm.nuc': (EXTERN, 'aten._linalg_svd.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'pca_lowrank': (EXTERN, "aten._linalg_svd.default, aten.linalg_qr.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer"),
    'pinverse': (EXTERN, 'aten.linalg_pinv.atol_rtol_tensor: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer'),
    'resize_as_': (EXTERN, 'aten.resize.default: no lowering for aten.resize.default'),
    'scatter_reduce.prod': (EXTERN, 'aten.scatter_reduce.two: scatter: writes to data-dependent positions; pipec generates no atomic scatter kernel yet'),
    'sort': (EXTERN, 'aten.sort.default: library: a row over 1024 elements (op_db has one of 8,000) is ATen\'s radix sort; shorter rows are generated'),
    'stft': (XFAIL, "complex dtypes are not in pipec's IR"),
    'svd_lowrank': (EXTERN, "aten._linalg_svd.default, aten.linalg_qr.default: library: a vendor library (cuBLAS/cuDNN/LAPACK) is the right answer"),
    'tensor_split': (XFAIL, "the sample's op reads tensor data while tracing (tensor_split by a tensor of indices)"),
    'topk': (EXTERN, 'aten.topk.default: library: ATen\'s kernel always, so that among equal values it picks eager\'s indices (a router whose scores tie routes as eager does)'),
}

# Rows that differ on half types (GPU sweep): name -> dtype -> (status, reason)
_HALF = ("float16", "bfloat16")
_NO_SVD = ("generated", "the half-type samples are vector/Frobenius norms: no SVD")
_JITERATOR = (XFAIL, "a jiterator op (CUDA-only, a C++ string compiled at run time): tracing cannot see into its kernel")
EXPECTED_BY_DTYPE: dict[str, dict[str, tuple[str, str]]] = {
    # op_db's half-type samples of these norms skip the matrix 2-norm (measured on the H200)
    "linalg.norm": {d: _NO_SVD for d in _HALF},
    "linalg.norm.subgradients_at_zero": {d: _NO_SVD for d in _HALF},
    "linalg.matrix_norm": {d: _NO_SVD for d in _HALF},
    # the GPU sweep runs more samples per entry (test_opinfo.GPU_SAMPLES) and these reach
    # a third one: tensordot's 1-D case (aten.dot) and normalize with p=0.5 (measured on the H200)
    "tensordot": {d: (EXTERN, "aten.dot.default: library: a vendor library is the right answer") for d in _HALF},
    "nn.functional.normalize": {d: (EXTERN, "aten.linalg_vector_norm.default: a norm of order 0.5 (needs pow: "
                                            "libdevice, not lowered)") for d in _HALF},
    # CUDA-only entries (the CPU sweep never sees them)
    **{name: {d: _JITERATOR for d in _HALF} for name in (
        "jiterator_unary", "jiterator_binary", "jiterator_binary_return_by_ref", "jiterator_2inputs_2outputs",
        "jiterator_4inputs_with_extra_args")},
}


def expected(name: str, dtype: str = "float32") -> tuple[str, str]:
    row = EXPECTED_BY_DTYPE.get(name, {}).get(dtype) or EXPECTED.get(name)
    return row if row is not None else ("generated", "")


def check(name: str, status: str, dtype: str = "float32") -> str | None:
    """None when `status` is what the table says, else a one-line problem."""
    want, why = expected(name, dtype)
    if status == "wrong":
        return f"{name}: WRONG result (never allowed)"
    if status != want:
        return f"{name}: expected {want}{f' ({why})' if why else ''}, got {status}: update opinfo_expectations.py"
    return None
