"""Triton helper functions a kernel may call (combine functions of the reduction rows in
reductions.py, `_pipec_gelu_half` of pointwise_ops.py); a kernel's source holds only those it
calls (`helpers_used`)."""

HELPERS = '''
@triton.jit
def _pipec_maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _pipec_minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def _pipec_fmax(a, b):
    # one max.NaN instruction: NaN wins, like torch.amax
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _pipec_fmin(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _pipec_welford(mean1, m2_1, n1, mean2, m2_2, n2):
    # Chan et al.: merge two (mean, sum of squared deviations, count) partials
    n = n1 + n2
    w2 = n2 / tl.maximum(n, 1.0)  # 0 when both are empty
    delta = mean2 - mean1
    return mean1 + delta * w2, m2_1 + m2_2 + delta * delta * n1 * w2, n


@triton.jit
def _pipec_product(a, b):
    return a * b


@triton.jit
def _pipec_argmax(v1, i1, v2, i2):
    take1 = (v1 > v2) | ((v1 == v2) & (i1 < i2)) | ((v1 != v1) & ((v2 == v2) | (i1 < i2)))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)


@triton.jit
def _pipec_argmin(v1, i1, v2, i2):
    take1 = (v1 < v2) | ((v1 == v2) & (i1 < i2)) | ((v1 != v1) & ((v2 == v2) | (i1 < i2)))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)


@triton.jit
def _pipec_gelu_half(x):
    # exact GELU, x * Phi(x), for a result rounded to bf16/fp16. libdevice's erf made a GELU pass
    # after a large bf16 GEMM compute-bound (docs/performance.md, "The half-precision GELU"); here
    # erfc(|z|) = t * P(t) * exp(-z^2), t = 1 / (1 + p |z|) (Abramowitz & Stegun 7.1.26, error
    # < 1.5e-7, ~10^4 below a bf16/fp16 rounding step) costs a reciprocal, an exp and five FMAs.
    # 1 + erf(z) is 2 - erfc(z) above 0 and erfc(-z) below, with no cancellation in the tail.
    # In a GEMM epilogue every instruction is paid per output element (issue-bound), so z = x / sqrt(2)
    # is folded into the constants (p / sqrt(2); exp(-z^2) as exp2(x^2 * -0.5 / ln 2)) and
    # t = 1 / d as rsqrt(d)^2: `1.0 / d` is div.full.f32, whose range checks around the
    # reciprocal cost ~7 instructions; d >= 1 here, so rsqrt's single MUFU op (relative error
    # ~2^-22 after squaring) does. sm_90 SASS: 16 instructions per element, 22 with the division.
    r = tl.rsqrt(1.0 + 0.2316418882663604 * tl.abs(x))
    t = r * r
    p = 0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    erfc = t * p * tl.exp2(x * x * -0.7213475204444817)
    return 0.5 * x * tl.where(x >= 0, 2.0 - erfc, erfc)
'''


def helpers_used(body: list[str]) -> str:
    """The helper functions the lines `body` call (and only those), as source."""
    text = "\n".join(body)
    parts = HELPERS.split("\n\n\n")
    used = [p.strip() for p in parts if p.split("def ")[1].split("(")[0] in text]
    return ("\n\n" + "\n\n\n".join(used) + "\n") if used else ""
