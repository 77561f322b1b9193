"""Philox-4x32-10 in torch int64 arithmetic: the executable meaning of the IR's `rand` op.

Bit-for-bit the counter-based generator of Triton's `tl.rand` / `tl.randn` (the key is the
seed's two 32-bit halves, the counter (lo, hi, 0, 0) the 64-bit position), so the reference
interpreter gives the compiled kernels' numbers, up to fp32 rounding of log/sin/cos.
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57
_ROUNDS = 10


def _mul_hi_lo(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of a * b for 32-bit a, b without overflowing int64:
    b is split in 16-bit halves so every partial product stays under 2**48."""
    bh, bl = b >> 16, b & 0xFFFF
    high_part, low_part = a * bh, a * bl
    hi = (high_part + (low_part >> 16)) >> 16
    lo = (((high_part & 0xFFFF) << 16) + low_part) & _M32
    return hi & _M32, lo


def philox(seed: torch.Tensor, counter: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The first two 32-bit outputs of Philox for int64 `seed` and int64 `counter` tensors."""
    seed, counter = seed.to(torch.int64), counter.to(torch.int64)
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    c0, c1 = counter & _M32, (counter >> 32) & _M32
    c2 = c3 = torch.zeros_like(c0)
    for _ in range(_ROUNDS):
        hi_b, lo_b = _mul_hi_lo(_ROUND_B, c2)
        hi_a, lo_a = _mul_hi_lo(_ROUND_A, c0)
        c0, c2, c1, c3 = hi_b ^ c1 ^ k0, hi_a ^ c3 ^ k1, lo_b, lo_a
        k0, k1 = (k0 + _KEY_A) & _M32, (k1 + _KEY_B) & _M32
    return c0, c1


def _uniform(x: torch.Tensor) -> torch.Tensor:
    """Triton's uint_to_uniform_float: the word as int32, negatives folded (~x), times 2**-31."""
    x = torch.where(x >= 2**31, x - 2**32, x)
    x = torch.where(x < 0, ~x, x)
    return x.to(torch.float32) * torch.tensor(4.6566127342e-10, dtype=torch.float32)


def rand(seed: torch.Tensor, counter: torch.Tensor, distribution: str) -> torch.Tensor:
    """U[0, 1) ("uniform") or N(0, 1) ("normal", Box-Muller) float32 values."""
    w0, w1 = philox(seed, counter)
    u1 = _uniform(w0)
    if distribution == "uniform":
        return u1
    if distribution != "normal":
        raise ValueError(f"rand: unknown distribution {distribution!r}")
    u1 = torch.clamp(u1, min=1.0e-7)
    theta = torch.tensor(6.283185307179586, dtype=torch.float32) * _uniform(w1)
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(theta)
