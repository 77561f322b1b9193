"""Autotuning candidates for generated kernels.

The first config is the one used without tuning (and by Triton's CPU interpreter,
where larger blocks mean fewer, vectorized programs); the runtime times the rest
on the GPU and keeps the fastest, once per size bucket (the runtime's `bucket`
option). A symbolic numel gets candidates for small and large sizes alike, capped
by the symbols' upper bounds when they have them; any config is correct at any size.

Reduction kernels come in three shapes (see writer.py):
* persistent rows: the whole row in registers, RBLOCK = the row rounded up to a power
  of two; warps grow with the elements a program holds (about 16 fp32 values per thread
  and live array), several rows per program when rows are short;
* looped rows (innermost reduction, long rows): one or a few rows per program, a wide
  RBLOCK walking the row;
* columns (non-innermost reduction): XBLOCK wide along the contiguous kept dim, RBLOCK
  short, so every load is a coalesced run of XBLOCK elements.
"""

from __future__ import annotations

import sympy
from pipec_ir import LaunchConfig

# A row is reduced in registers when its power-of-two block of every row-level input, as held
# (fp32 for half types), is at most this many bytes: one row of 32768 bf16 or fp32 elements.
# Values computed from the inputs are not counted: layer_norm's backward keeps three fp32 rows
# live across its second sum and still gains from holding them. Holding beat looping at every
# row length measured up to this budget (docs/performance.md, "A row is held in registers").
PERSISTENT_ROW_BYTES = 131072
# A scan's row is held whole up to this many bytes (fp32 16384): holding gained up to there and
# nothing at 128 KiB (docs/performance.md, "A scan's row is held up to 64 KiB").
PERSISTENT_SCAN_BYTES = 65536
# A column reduction (non-innermost dims) is persistent only up to this many rows.
OUTER_PERSISTENT_LIMIT = 64
# Elements a persistent program holds per warp (16 per thread of 32 lanes).
_ELEMENTS_PER_WARP = 512


def pow2_at_least(n: int) -> int:
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


def _cap(numel: sympy.Expr, upper: int | None) -> int:
    if numel.is_Integer:
        return pow2_at_least(int(numel))
    return pow2_at_least(upper) if upper is not None else 1 << 30


def pointwise_configs(xnumel: sympy.Expr, upper: int | None = None) -> tuple[LaunchConfig, ...]:
    cap = _cap(xnumel, upper)
    candidates = ((1024, 4), (512, 4), (256, 4), (2048, 8), (4096, 8), (128, 4))
    if not xnumel.is_Integer:  # symbolic: small sizes (a batch of 1) are as likely as large ones
        candidates += ((64, 2),)
    out, seen = [], set()
    for block, warps in candidates:
        b = max(16, min(block, cap))
        if b not in seen:
            seen.add(b)
            out.append(LaunchConfig((("XBLOCK", b),), num_warps=warps if b >= 256 else 2))
    return tuple(out)


def tiled_configs(ynumel: int, xnumel: int) -> tuple[LaunchConfig, ...]:
    """Candidates for a pointwise kernel written in 2-d tiles (tiling.py): square tiles first,
    then tall and wide ones; a side is at most its dim rounded up to a power of two. The tuning
    table's entries name a kernel's candidates (runtime tuning_table.py): changing this list
    orphans sm90.json's tiled entries until it is learned again. In SD 1.5's tuning run (session
    34) 128 x 64 and 256 x 16 never won: the first to drop when the table is next relearned."""
    ycap, xcap = pow2_at_least(ynumel), pow2_at_least(xnumel)
    candidates = ((64, 64, 4), (32, 32, 4), (128, 64, 8), (64, 128, 8), (128, 32, 4), (32, 128, 4), (256, 16, 4))
    out = [LaunchConfig((("YBLOCK", min(y, ycap)), ("XBLOCK", min(x, xcap))), num_warps=warps)
           for y, x, warps in candidates]
    return tuple(dict.fromkeys(out))


def row_warps(elements: int) -> int:
    """num_warps for a program holding `elements` values of a row block: 2 to 16."""
    return max(2, min(16, pow2_at_least(max(1, elements // _ELEMENTS_PER_WARP))))


def _persistent_rows(xcap: int, rblock: int) -> list[LaunchConfig]:
    out = []
    for budget in (4096, 1024, 8192, 2048, 16384):  # elements per program
        x = max(1, min(budget // rblock, xcap, 64))
        warps = row_warps(x * rblock)
        choices = (warps, warps // 2, warps * 2) if x * rblock >= 4096 else (warps,)
        for w in choices:
            if 1 <= w <= 32:
                out.append(LaunchConfig((("XBLOCK", x), ("RBLOCK", rblock)), num_warps=w))
    return out


def _persistent_columns(xcap: int, rblock: int) -> list[LaunchConfig]:
    out = []
    for budget in (4096, 2048, 8192, 1024):
        x = max(1, min(budget // rblock, xcap, 1024))
        out.append(LaunchConfig((("XBLOCK", x), ("RBLOCK", rblock)), num_warps=row_warps(x * rblock)))
    return out


def reduction_configs(xnumel: sympy.Expr, rnumel: sympy.Expr, persistent: bool,
                      upper: int | None = None, outer: bool = False) -> tuple[LaunchConfig, ...]:
    """Candidates for a reduction kernel; `outer`: it reduces non-innermost dims (columns)."""
    xcap = _cap(xnumel, upper)
    if persistent:
        rblock = pow2_at_least(int(rnumel))
        out = _persistent_columns(xcap, rblock) if outer else _persistent_rows(xcap, rblock)
        return tuple(dict.fromkeys(out))
    if outer:  # (XBLOCK contiguous columns, RBLOCK rows per step); narrow ones give few columns more programs
        candidates = ((64, 64, 8), (128, 16, 4), (64, 32, 4), (256, 8, 4), (128, 32, 8), (32, 128, 8), (16, 256, 8))
    else:
        candidates = ((1, 1024, 4), (1, 2048, 8), (1, 4096, 8), (1, 512, 4), (4, 512, 8))
        if not rnumel.is_Integer:  # short rows (a sequence of 17) are as likely as long ones
            candidates += ((8, 128, 4), (32, 32, 4))
    out = [LaunchConfig((("XBLOCK", min(x, xcap)), ("RBLOCK", r)), num_warps=warps)
           for x, r, warps in candidates]
    return tuple(dict.fromkeys(out))
