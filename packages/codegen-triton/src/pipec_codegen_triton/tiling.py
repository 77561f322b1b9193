"""Pointwise kernels in 2-d tiles, for reads that transpose.

A pointwise kernel walks its domain row-major in flat blocks, so it stores contiguous runs. An
input read in another order (an NCHW activation copied to NHWC, a conv weight [O, I, 3, 3]
copied to [O, 3, 3, I]: conv_layouts.py's copies) is then read with a stride between neighbouring
lanes, and each 32-byte sector serves one or two elements: the 1280 x 1280 x 3 x 3 weight copy of
SD 1.5's UNet ran at about 1.2 TB/s on an H100, where a copy runs at 3.

Such a kernel is written in tiles instead, as Inductor tiles its pointwise kernels: the kept dims
split in two at the dim the input reads contiguously, rows (`yindex`) over the dims up to it
and columns (`xindex`) over the rest. A tile is [YBLOCK, XBLOCK]: the transposing load runs
contiguously down its rows, the store along its columns, and Triton's coalescing pass gives each
access its own layout and converts between them through shared memory. The values computed are
the same at the same indices; only the order the lanes visit them changes.

A reduction has the same trouble when its row is read across its innermost dim: a group norm's
statistics over a conv's channels-last result, rows of [C/G, H, W] stored [H, W, C/G], read with
a stride of C between neighbouring lanes (SD 1.5's group norms took twice as long once their
convs' results were NHWC: docs/performance.md). `row_walk` orders the row's dims as that input
stores them, so the lanes step through memory; a sum, a max or Welford's mean and variance do
not depend on the order (up to rounding), and rows whose order shows (an argmax's index, a
full-size output stored along the row) are left as they are.

`tile_split` and `row_walk` decide after a first write of the kernel (the writer records each
load's offset), so the decision reads the offsets exactly as the kernel computes them.
"""

from __future__ import annotations

import sympy
from pipec_ir.ops import REDUCTION, kind_of, reduction_of
from pipec_ir.symbolic import numel

TILE_MASK = "tmask"  # rows and columns in range: the mask of a tile's stores
# tiles pay where the transposed input is large; below this many elements a flat kernel is as fast
MIN_TILED_NUMEL = 1 << 15
MIN_SIDE = 16  # rows or columns fewer than this make tiles mostly masked
MAX_COLUMNS = 1 << 22  # column blocks go on grid axis 1 (at most 65535 of them)
NO_TILES = ("take", "rand")  # ops whose code assumes the flat block (indexing_ops.py's masks)


def tile_split(writer) -> int | None:
    """How many leading kept dims the rows of a tiled version of `writer`'s (flat, already
    written) pointwise kernel take; None where the kernel stays flat: no input read transposed,
    sizes that are not all static, ops that assume a flat block."""
    domain = writer.domain
    kept = writer.kept
    if len(kept) < 2 or not all(sympy.sympify(domain[d]).is_Integer for d in kept):
        return None
    if any(writer.nodes[n].op in NO_TILES for n in writer.kernel.nodes):
        return None
    syms = writer.xsyms
    best = None  # (input numel, split)
    for name, offset in writer.load_offsets:
        size = numel(writer.types[name].shape)
        if not size.is_Integer or int(size) < MIN_TILED_NUMEL:
            continue
        unit = _unit_stride_dim(offset, syms)
        if unit is None or unit == len(kept) - 1:
            continue  # no contiguous dim, or the innermost: the flat walk reads it in runs
        split = unit + 1
        rows = int(numel([domain[d] for d in kept[:split]]))
        columns = int(numel([domain[d] for d in kept[split:]]))
        if rows < MIN_SIDE or columns < MIN_SIDE or columns > MAX_COLUMNS:
            continue
        if best is None or int(size) > best[0]:
            best = (int(size), split)
    return None if best is None else best[1]


def row_walk(writer) -> tuple[int, ...] | None:
    """The order (positions in the kernel's `reduce_dims`, outermost first) to walk the rows of
    `writer`'s (already written) reduction kernel in: its largest row input's unit-stride dim
    innermost, the others as they are. None where the row is read in order already, or where
    the order would show."""
    reduced = writer.reduced
    if len(reduced) < 2 or not all(sympy.sympify(writer.domain[d]).is_Integer for d in reduced):
        return None
    for n in writer.kernel.nodes:
        node = writer.nodes[n]
        if node.op in NO_TILES or (kind_of(node.op) == REDUCTION and reduction_of(node.op).indexed):
            return None
    if any(tuple(writer.types[o].shape) == writer.domain for o in writer.kernel.outputs):
        return None  # a full-size output would be stored across its rows
    best = None  # (input numel, unit-stride position)
    for name, offset in writer.load_offsets:
        size = numel(writer.types[name].shape)
        if not size.is_Integer or int(size) < MIN_TILED_NUMEL:
            continue
        unit = _unit_stride_dim(offset, writer.rsyms)
        if unit is not None and (best is None or int(size) > best[0]):
            best = (int(size), unit)
    if best is None or best[1] == len(reduced) - 1:
        return None
    unit = best[1]
    return tuple(p for p in range(len(reduced)) if p != unit) + (unit,)


def _unit_stride_dim(offset, syms) -> int | None:
    """The position in `syms` of the dim `offset` steps by one element along, if any."""
    terms = sympy.expand(sympy.sympify(offset)).as_coefficients_dict()
    for k, s in enumerate(syms):
        if terms.get(s) == 1:
            return k
    return None


def load_mask(offset, row_syms, column_syms) -> str:
    """The mask of a tiled kernel's load at `offset`: of the tile's axes that it varies along
    (a per-row value, a group norm's mean, is a [YBLOCK, 1] load under `ymask`)."""
    free = sympy.sympify(offset).free_symbols
    rows, columns = bool(free & set(row_syms)), bool(free & set(column_syms))
    if rows and columns:
        return TILE_MASK
    return "ymask" if rows else "xmask"


def tile_lines(writer) -> list[str]:
    """The lines opening a tiled kernel: each program's rows and columns, and their masks."""
    return ["    yoffset = tl.program_id(0) * YBLOCK",
            "    yindex = (yoffset + tl.arange(0, YBLOCK))[:, None]",
            writer._mask("ymask", "yindex", "ynumel", writer.ynumel, "YBLOCK", "[YBLOCK, 1]"),
            "    xoffset = tl.program_id(1) * XBLOCK",
            "    xindex = (xoffset + tl.arange(0, XBLOCK))[None, :]",
            writer._mask("xmask", "xindex", "xnumel", writer.xnumel, "XBLOCK", "[1, XBLOCK]"),
            f"    {TILE_MASK} = ymask & xmask"]
