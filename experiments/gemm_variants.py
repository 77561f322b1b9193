"""Raw Triton GEMM variants against cuBLAS on issue 6's Linear -> GELU -> Linear shapes (bf16, H200).

    python experiments/gemm_variants.py $OUT/gemm_variants.json

Not pipec's code path: a measurement of what a Triton matmul template can reach, to decide
what pipec's template should become. For each GEMM (x[M, K] @ W[N, K]^T + bias, GELU on the
first) it checks and times cuBLAS (`F.linear` + GELU), the pointer-based tile loop pipec's
template uses today, the same with TMA tensor descriptors (host `TensorDescriptor`), and a
persistent TMA kernel (one program per SM walking tiles in grouped order, with and without
`flatten`), over a few tile configs. Measured 2026-11-29 (H200, triton 3.6): persistent TMA
128x256x64 beat cuBLAS on the second GEMM (0.365 vs 0.3725 ms); nothing beat cuBLAS + GELU on
the first (best 0.497 vs 0.443 ms: the exact-GELU epilogue is not overlapped with the K loop).
2026-12-01, with the first GEMM's GELU also in pipec's half-precision form (GELU=2): persistent
TMA 128x256x64, 4 stages, subtiled epilogue 0.4254 ms against cuBLAS + GELU 0.4775 (libdevice's
erf: 0.4640 vs 0.4905); without GELU it matches cuBLAS (0.3996 vs 0.3980). pipec's template
got this kernel as its persistent TMA config (codegen matmul_tma.py).
"""

import sys
import json
import torch
import triton
import triton.language as tl
import torch.nn.functional as F
from triton.testing import do_bench

try:  # triton >= 3.4: host-side TMA descriptors
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:
    TensorDescriptor = None


@triton.jit
def _gelu(x, GELU: tl.constexpr):
    """GELU 0: none; 1: exact through libdevice's erf; 2: exact through pipec's bf16/fp16 form
    (Abramowitz & Stegun 7.1.26 erfc: an rsqrt, an exp2, five FMAs; codegen's _pipec_gelu_half);
    3: the same with a division and unfolded constants, as pipec wrote it before 2026-12-01."""
    if GELU == 1:
        x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif GELU == 2:
        r = tl.rsqrt(1.0 + 0.2316418882663604 * tl.abs(x))
        t = r * r
        p = 0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
        erfc = t * p * tl.exp2(x * x * -0.7213475204444817)
        x = 0.5 * x * tl.where(x >= 0, 2.0 - erfc, erfc)
    elif GELU == 3:  # GELU=2 as pipec wrote it until 2026-12-01: 1 / d as a division (div.full.f32)
        z = x * 0.7071067811865476
        t = 1.0 / (1.0 + 0.3275911 * tl.abs(z))
        p = 0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
        erfc = t * p * tl.exp(-z * z)
        x = 0.5 * x * tl.where(z >= 0, 2.0 - erfc, erfc)
    return x


@triton.jit
def _grouped_tile(tile, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(row tile, column tile) of output tile number `tile` in grouped order: GROUP_M row tiles
    walk the column tiles together, so B's tiles are reused from L2."""
    num_pid_m = tl.cdiv(M, BM)
    in_group = GROUP_M * tl.cdiv(N, BN)
    first_m = (tile // in_group) * GROUP_M
    group_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % in_group) % group_m, (tile % in_group) // group_m


@triton.jit
def mm_ptr(
    a_ptr,
    b_ptr,
    c_ptr,
    bias_ptr,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    GELU: tl.constexpr,
):
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BM, BN, GROUP_M)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rn[None, :] * K + rk[:, None]
    acc = tl.zeros((BM, BN), tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BK
        b_ptrs += BK
    x = _gelu(acc + tl.load(bias_ptr + rn).to(tl.float32)[None, :], GELU)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], x.to(tl.bfloat16))


@triton.jit
def _store_halves(part, c_desc, bias_ptr, om, on, BM: tl.constexpr, BN: tl.constexpr, GELU: tl.constexpr):
    """The epilogue of a [BM, BN] part of a tile in two [BM, BN / 2] halves (SUBTILE=4: quarters)."""
    left, right = tl.split(tl.permute(tl.reshape(part, (BM, 2, BN // 2)), (0, 2, 1)))
    rn = on + tl.arange(0, BN // 2)
    c_desc.store([om, on], _gelu(left + tl.load(bias_ptr + rn).to(tl.float32)[None, :], GELU).to(tl.bfloat16))
    x = _gelu(right + tl.load(bias_ptr + rn + BN // 2).to(tl.float32)[None, :], GELU)
    c_desc.store([om, on + BN // 2], x.to(tl.bfloat16))


@triton.jit
def _tma_tile(a_desc, b_desc, c_desc, bias_ptr, om, on, k_tiles, BM: tl.constexpr, BN: tl.constexpr,
              BK: tl.constexpr, GELU: tl.constexpr, SUBTILE: tl.constexpr = False):
    """One [BM, BN] output tile at (om, on): the K loop on TMA loads, then bias (+ GELU) and a TMA
    store; SUBTILE: the epilogue in two [BM, BN/2] halves (c_desc's block is the half), which
    halves the registers and shared memory the store needs; SUBTILE=4: in four quarters."""
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(k_tiles):
        acc = tl.dot(a_desc.load([om, k * BK]), b_desc.load([on, k * BK]).T, acc)
    if SUBTILE == 4:
        left, right = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))
        _store_halves(left, c_desc, bias_ptr, om, on, BM, BN // 2, GELU)
        _store_halves(right, c_desc, bias_ptr, om, on + BN // 2, BM, BN // 2, GELU)
    elif SUBTILE:
        halves = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        rn = on + tl.arange(0, BN // 2)
        x = _gelu(left + tl.load(bias_ptr + rn).to(tl.float32)[None, :], GELU)
        c_desc.store([om, on], x.to(tl.bfloat16))
        x = _gelu(right + tl.load(bias_ptr + rn + BN // 2).to(tl.float32)[None, :], GELU)
        c_desc.store([om, on + BN // 2], x.to(tl.bfloat16))
    else:
        rn = on + tl.arange(0, BN)
        x = _gelu(acc + tl.load(bias_ptr + rn).to(tl.float32)[None, :], GELU)
        c_desc.store([om, on], x.to(tl.bfloat16))


@triton.jit
def mm_tma(
    a_desc,
    b_desc,
    c_desc,
    bias_ptr,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    GELU: tl.constexpr,
):
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BM, BN, GROUP_M)
    _tma_tile(a_desc, b_desc, c_desc, bias_ptr, pid_m * BM, pid_n * BN, tl.cdiv(K, BK), BM, BN, BK, GELU)


@triton.jit
def mm_tma_persistent(
    a_desc,
    b_desc,
    c_desc,
    bias_ptr,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    GELU: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
    FLATTEN: tl.constexpr,
    SUBTILE: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    _persistent_walk(a_desc, b_desc, c_desc, bias_ptr, M, N, K, BM, BN, BK, GROUP_M, GELU, NUM_PROGRAMS, FLATTEN,
                     SUBTILE, WARP_SPECIALIZE)


@triton.jit
def _persistent_walk(a_desc, b_desc, c_desc, bias_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                     BK: tl.constexpr, GROUP_M: tl.constexpr, GELU: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                     FLATTEN: tl.constexpr, SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    k_tiles = tl.cdiv(K, BK)
    num_tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _grouped_tile(tile, M, N, BM, BN, GROUP_M)
        _tma_tile(a_desc, b_desc, c_desc, bias_ptr, pid_m * BM, pid_n * BN, k_tiles, BM, BN, BK, GELU, SUBTILE)


@triton.jit
def mm_tma_persistent_device(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                             BK: tl.constexpr, GROUP_M: tl.constexpr, GELU: tl.constexpr,
                             NUM_PROGRAMS: tl.constexpr, SUBTILE: tl.constexpr):
    """mm_tma_persistent with the descriptors made on the device (`tl.make_tensor_descriptor`),
    as pipec's template makes them, instead of passed from the host."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN // (SUBTILE + 1)])
    _persistent_walk(a_desc, b_desc, c_desc, bias_ptr, M, N, K, BM, BN, BK, GROUP_M, GELU, NUM_PROGRAMS, True,
                     SUBTILE, False)


POINTER_CONFIGS = [  # (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages)
    (128, 128, 64, 8, 8, 3), (128, 256, 64, 8, 8, 3), (128, 256, 64, 8, 8, 4),
    (256, 128, 64, 8, 8, 3), (128, 128, 64, 8, 4, 4), (128, 256, 32, 8, 8, 5),
    # 96 KB of shared memory: two programs per SM, one's epilogue beside the other's K loop
    (128, 128, 64, 8, 4, 3), (128, 128, 64, 16, 4, 3),
]
TMA_CONFIGS = [
    (128, 128, 64, 8, 8, 3), (128, 256, 64, 8, 8, 3), (128, 256, 64, 8, 8, 4),
    (256, 128, 64, 8, 8, 3), (128, 128, 64, 8, 4, 4), (128, 128, 128, 8, 8, 3),
    (128, 128, 64, 8, 4, 3),
]
# persistent variants: (config, programs per SM, subtiled epilogue, warp_specialize)
PERSISTENT = [
    ((128, 256, 64, 8, 8, 3), 1, False, False), ((128, 256, 64, 8, 8, 3), 1, True, False),
    ((128, 256, 64, 8, 8, 4), 1, True, False), ((128, 128, 64, 8, 4, 3), 2, False, False),
    ((128, 128, 64, 8, 4, 3), 2, True, False), ((128, 256, 64, 8, 8, 3), 1, True, True),
    ((128, 128, 64, 8, 8, 4), 1, True, True), ((128, 128, 64, 8, 4, 4), 2, True, False),
    ((256, 128, 64, 8, 8, 3), 1, True, False), ((128, 128, 64, 8, 4, 4), 2, True, True),
]


def launch(kernel, grid, args, out, num_warps, num_stages):
    """A call of `kernel` over `grid` that returns `out` (what it writes)."""
    def call():
        kernel[grid](*args, num_warps=num_warps, num_stages=num_stages)
        return out
    return call


def run(M, K, N, gelu: int):
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K**0.5
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    ref = F.linear(x, w, b)
    ref = F.gelu(ref) if gelu else ref
    flops = 2 * M * N * K
    rows = {}

    def record(name, fn, check=True):
        try:
            if check:
                torch.testing.assert_close(fn().float(), ref.float(), atol=3e-2, rtol=3e-2)
            ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
            rows[name] = ms
            print(f"  {name:<50} {ms:.4f} ms {flops / ms / 1e9:6.0f} TFLOP/s", flush=True)
        except Exception as e:  # noqa: BLE001 - a config that does not fit (shared memory) is reported
            print(f"  {name:<50} FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)

    print(f"M={M} K={K} N={N} gelu={gelu}")
    record("cublas linear", lambda: F.linear(x, w, b), check=not gelu)
    if gelu:
        record("cublas linear + gelu", lambda: F.gelu(F.linear(x, w, b)))
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    tiles = lambda bm, bn: triton.cdiv(M, bm) * triton.cdiv(N, bn)  # noqa: E731
    for bm, bn, bk, g, nw, ns in POINTER_CONFIGS:
        args = (x, w, out, b, M, N, K, bm, bn, bk, g, gelu)
        record(f"ptr {bm}x{bn}x{bk} w{nw} s{ns}", launch(mm_ptr, (tiles(bm, bn),), args, out, nw, ns))
    if TensorDescriptor is None:
        return rows
    nsm = torch.cuda.get_device_properties(0).multi_processor_count

    def descriptors(bm, bn, bk, subtile=False):
        return (TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
                TensorDescriptor.from_tensor(out, [bm, bn // 2 if subtile else bn]))

    for bm, bn, bk, g, nw, ns in TMA_CONFIGS:
        args = (*descriptors(bm, bn, bk), b, M, N, K, bm, bn, bk, g, gelu)
        record(f"tma {bm}x{bn}x{bk} w{nw} s{ns}", launch(mm_tma, (tiles(bm, bn),), args, out, nw, ns))
    for (bm, bn, bk, g, nw, ns), per_sm, subtile, ws in PERSISTENT:
        programs = min(per_sm * nsm, tiles(bm, bn))
        args = (*descriptors(bm, bn, bk, subtile), b, M, N, K, bm, bn, bk, g, gelu, programs, True, subtile, ws)
        record(f"tma-persistent {bm}x{bn}x{bk} w{nw} s{ns} x{per_sm}/SM subtile={subtile} ws={ws}",
               launch(mm_tma_persistent, (programs,), args, out, nw, ns))
    return rows


if __name__ == "__main__":
    results = {"gemm1 gelu=half": run(8192, 2048, 8192, 2), "gemm1 gelu=erf": run(8192, 2048, 8192, 1),
               "gemm1 no gelu": run(8192, 2048, 8192, 0), "gemm2": run(8192, 8192, 2048, 0)}
    with open(sys.argv[1] if len(sys.argv) > 1 else "gemm_variants.json", "w") as f:
        json.dump(results, f, indent=1)
