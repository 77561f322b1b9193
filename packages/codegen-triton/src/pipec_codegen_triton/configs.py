"""Autotuning candidates for generated kernels.

The first config is the one used without tuning (and by Triton's CPU interpreter,
where larger blocks mean fewer, vectorized programs); the runtime times the rest
on the GPU and keeps the fastest, once per size bucket (the runtime's `bucket`
option). A symbolic numel gets candidates for small and large sizes alike, capped
by the symbols' upper bounds when they have them; any config is correct at any size.
"""

from __future__ import annotations

import sympy
from pipec_ir import LaunchConfig


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def upper_bound(expr: sympy.Expr, symbols) -> int | None:
    """The largest value of a size expression over the symbols' ranges, if they are all bounded."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    uppers = {s.name: s.upper for s in symbols}
    subs = {}
    for sym in expr.free_symbols:
        if uppers.get(sym.name) is None:
            return None
        subs[sym] = uppers[sym.name]
    try:
        return int(expr.xreplace(subs))
    except (TypeError, ValueError):
        return None


def pointwise_configs(xnumel: sympy.Expr, upper: int | None = None) -> tuple[LaunchConfig, ...]:
    if xnumel.is_Integer:
        cap = _pow2_at_least(int(xnumel))
        candidates = ((1024, 4), (512, 4), (256, 4), (2048, 8), (128, 4))
    else:  # symbolic: small sizes (a batch of 1) are as likely as large ones
        cap = _pow2_at_least(upper) if upper is not None else 1 << 30
        candidates = ((1024, 4), (512, 4), (256, 4), (2048, 8), (128, 4), (64, 2))
    out, seen = [], set()
    for block, warps in candidates:
        b = max(16, min(block, cap))
        if b not in seen:
            seen.add(b)
            out.append(LaunchConfig((("XBLOCK", b),), num_warps=warps if b >= 256 else 2))
    return tuple(out)


def reduction_configs(xnumel: sympy.Expr, rnumel: sympy.Expr, persistent: bool,
                      upper: int | None = None) -> tuple[LaunchConfig, ...]:
    if xnumel.is_Integer:
        xcap = _pow2_at_least(int(xnumel))
    else:
        xcap = _pow2_at_least(upper) if upper is not None else 1 << 30
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
    candidates = ((1, 1024, 4), (1, 2048, 8), (1, 512, 4), (4, 512, 8))
    if not rnumel.is_Integer:  # short rows (a sequence of 17) are as likely as long ones
        candidates += ((8, 128, 4), (32, 32, 4))
    for x, r, warps in candidates:
        out.append(LaunchConfig((("XBLOCK", min(x, xcap)), ("RBLOCK", r)), num_warps=warps))
    return tuple(dict.fromkeys(out))
