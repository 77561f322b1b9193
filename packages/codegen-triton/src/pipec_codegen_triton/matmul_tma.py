"""The GEMM template's persistent TMA variant (Hopper and newer): what it needs and its main loop.

One program per SM walks the output tiles in grouped order (`for tile in range(pid, tiles,
programs)`); A and B tiles come through TMA tensor descriptors made on the device
(`tl.make_tensor_descriptor`), which Triton software-pipelines into wgmma on Hopper. The
epilogue is the template's own, optionally on two [BLOCK_M, BLOCK_N / 2] halves of the
accumulator (SUBTILE: half the epilogue's registers, so the exact GELU of a bf16 Linear stalls
the next tile's loads less); outputs laid out as [M, N] leave through TMA stores
(matmul_template.tma_stores), the others through masked pointer stores.

On the MLP's GELU GEMM this kernel beats cuBLAS + a GELU pass and every one-tile-per-program
pointer kernel, but its epilogue is not hidden behind the MMAs, and neither Triton's warp
specialization nor two programs per SM hid it (docs/performance.md, "The persistent TMA
template config"; the ping-pong kernel of matmul_gluon.py does).

A descriptor needs a 16-byte aligned base (the runtime runs configs[0], the pointer variant,
for a call whose pointers are not: `TMA_CONSTANT`), a unit innermost stride and 16-byte
multiples for the other stride; operands that are not laid out so get no TMA configs.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

# Programs a persistent config's grid names: one per SM of an H100/H200 SXM (132 SMs). Any count
# is correct (programs stride over the tiles); the runtime launches at most one per SM of the GPU
# it runs on (docs/IR.md, "Launch configs"), since on fewer SMs the extra programs would run as a
# second wave. A GPU with more SMs than 132 leaves the extra ones idle.
PERSISTENT_PROGRAMS = 132
# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages, SUBTILE): the best persistent TMA
# tile for both MLP GEMMs (docs/performance.md, "The persistent TMA template config"), at 4 stages (192 KB of A and B tiles beside
# the 32 KB store buffer: a config whose epilogue needs more shared memory fails to compile and
# loses its timing) and at 3. Each persistent kernel costs seconds of cold compile (the GPT-2
# block's budget is a quarter of Inductor max-autotune's): two configs, no more, and only the
# first beside a Gluon ping-pong alternative (matmul_gluon.py), which hides the epilogue better.
TMA_CONFIGS = (
    (128, 256, 64, 8, 8, 4, 1),
    (128, 256, 64, 8, 8, 3, 1),
)
_ITEMSIZE = {"float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class TmaOperand:
    """How the template reads one operand through a descriptor over its root's memory."""
    shape: tuple[str, str]  # the descriptor's [outer, inner] sizes (kernel parameters)
    stride: str  # the outer stride (a literal); the inner one is 1
    block: tuple[str, str]  # block_shape
    transposed: bool  # the loaded block is the operand tile transposed


def tma_operand(strides: dict, offset, dtype: str, rows: str, cols: str) -> TmaOperand | None:
    """The descriptor for a [rows, cols] operand whose element (r, c) is at
    `root[r * strides[rows] + c * strides[cols]]`, or None when TMA cannot read it (an offset
    into its root, a symbolic or misaligned stride, no unit stride)."""
    itemsize = _ITEMSIZE.get(dtype)
    if itemsize is None or sympy.sympify(offset) != 0:
        return None
    sizes = {"m": "M", "n": "N", "k": "K"}
    blocks = {"m": "BLOCK_M", "n": "BLOCK_N", "k": "BLOCK_K"}
    for unit, outer in ((cols, rows), (rows, cols)):
        stride = sympy.sympify(strides[outer])
        if sympy.sympify(strides[unit]) == 1 and stride.is_Integer and int(stride) > 0 \
                and int(stride) * itemsize % 16 == 0:
            return TmaOperand((sizes[outer], sizes[unit]), str(int(stride)), (blocks[outer], blocks[unit]),
                              transposed=unit == rows)
    return None


def persistent_split(m: int, n: int, block_m: int, block_n: int,
                     programs: int = PERSISTENT_PROGRAMS) -> tuple[int, int]:
    """Tiles per program along M and N (tm, tn) so that the 2-D grid cdiv(M, tm * BLOCK_M) x
    cdiv(N, tn * BLOCK_N) launches as many programs as possible, at most `programs`."""
    tiles_m, tiles_n = -(-m // block_m), -(-n // block_n)
    best = (tiles_m, tiles_n)
    best_count = 1
    for tm in range(1, min(tiles_m, 4096) + 1):
        rows = -(-tiles_m // tm)
        if rows > programs:
            continue
        tn = -(-tiles_n // (programs // rows))
        count = rows * -(-tiles_n // tn)
        if count > best_count:
            best, best_count = (tm, tn), count
    return best


def persistent_loop(a: TmaOperand, b: TmaOperand) -> list[str]:
    """The persistent tile walk up to the K loop's end: defines `acc`, `om`, `on`, `rm` per tile
    (8 spaces deep, inside `for tile`); the caller appends the epilogue at that depth."""

    def descriptor(name: str, op: TmaOperand) -> str:
        return (f"    {name}_desc = tl.make_tensor_descriptor({name}_ptr, shape=[{op.shape[0]}, {op.shape[1]}], "
                f"strides=[{op.stride}, 1], block_shape=[{op.block[0]}, {op.block[1]}])")

    def tile(name: str, op: TmaOperand, at: dict) -> str:
        coords = ", ".join(at[d] for d in op.block)
        return f"{name}_desc.load([{coords}])" + (".T" if op.transposed else "")

    at = {"BLOCK_M": "om", "BLOCK_N": "on", "BLOCK_K": "k * BLOCK_K"}
    return [
        descriptor("a", a),
        descriptor("b", b),
        "    num_pid_m = tl.cdiv(M, BLOCK_M)",
        "    num_pid_n = tl.cdiv(N, BLOCK_N)",
        "    num_pid_in_group = GROUP_M * num_pid_n",
        "    k_tiles = tl.cdiv(K, BLOCK_K)",
        "    programs = tl.num_programs(0) * tl.num_programs(1)",
        "    first = tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)",
        "    # each program walks the tiles `programs` apart, in grouped order (B's columns stay in L2)",
        "    for tile in tl.range(first, num_pid_m * num_pid_n, programs, flatten=True):",
        "        group_id = tile // num_pid_in_group",
        "        group_size_m = tl.minimum(num_pid_m - group_id * GROUP_M, GROUP_M)",
        "        om = (group_id * GROUP_M + (tile % num_pid_in_group) % group_size_m) * BLOCK_M",
        "        on = ((tile % num_pid_in_group) // group_size_m) * BLOCK_N",
        "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        "        # out-of-bounds rows, columns and K are read as zeros by the TMA unit: no masks",
        "        for k in range(k_tiles):",
        f"            acc = tl.dot({tile('a', a, at)}, {tile('b', b, at)}, acc)",
        "        rm = om + tl.arange(0, BLOCK_M)",
    ]


SUBTILE_SPLIT = [
    "        # two [BLOCK_M, BLOCK_N // 2] halves: the epilogue's registers halve",
    "        acc_left, acc_right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))",
]
