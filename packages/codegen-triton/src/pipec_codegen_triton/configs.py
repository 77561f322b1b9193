"""Autotuning candidates for generated kernels.

The first config is the one used without tuning (and by Triton's CPU interpreter,
where larger blocks mean fewer, vectorized programs); the runtime times the rest
on the GPU and keeps the fastest.
"""

from __future__ import annotations

import sympy
from pipec_ir import LaunchConfig


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def pointwise_configs(xnumel: sympy.Expr) -> tuple[LaunchConfig, ...]:
    cap = _pow2_at_least(int(xnumel)) if xnumel.is_Integer else 1 << 30
    out, seen = [], set()
    for block, warps in ((1024, 4), (512, 4), (256, 4), (2048, 8), (128, 4)):
        b = max(16, min(block, cap))
        if b not in seen:
            seen.add(b)
            out.append(LaunchConfig((("XBLOCK", b),), num_warps=warps if b >= 256 else 2))
    return tuple(out)


def reduction_configs(xnumel: sympy.Expr, rnumel: sympy.Expr, persistent: bool) -> tuple[LaunchConfig, ...]:
    xcap = _pow2_at_least(int(xnumel)) if xnumel.is_Integer else 1 << 30
    if persistent:
        rblock = _pow2_at_least(int(rnumel))
        out, seen = [], set()
        for budget in (4096, 1024, 8192, 2048):  # elements per program
            x = max(1, min(budget // rblock, xcap, 64))
            if x not in seen:
                seen.add(x)
                warps = 8 if x * rblock >= 4096 else 4 if x * rblock >= 1024 else 2
                out.append(LaunchConfig((("XBLOCK", x), ("RBLOCK", rblock)), num_warps=warps))
        return tuple(out)
    out = []
    for x, r, warps in ((1, 1024, 4), (1, 2048, 8), (1, 512, 4), (4, 512, 8)):
        out.append(LaunchConfig((("XBLOCK", min(x, xcap)), ("RBLOCK", r)), num_warps=warps))
    return tuple(dict.fromkeys(out))
