"""Gluon ping-pong GEMM with a bias + exact-GELU epilogue on Hopper (sm_90), against cuBLAS.

    python experiments/gemm_gluon.py $OUT/gemm_gluon.json

Computes C = GELU(A @ W^T + bias): A [M=8192, K=2048] bf16 row-major, W [N=8192, K=2048] bf16 (an
nn.Linear weight, so B = W^T is K-major), bias [N] bf16, C [M, N] bf16, fp32 accumulation.

Why a Gluon kernel: a plain Triton persistent TMA kernel runs the epilogue (bias + GELU + store) on the
same warps that issue the wgmmas, so the tensor cores idle during it (~0.47 ms with GELU vs ~0.42 ms
without on the H200). The kernel here is warp-specialized ping-pong, as CUTLASS's
KernelTmaWarpSpecializedPingpong:

  * a producer partition (1 warp, few registers) streams A and W tiles with TMA into a STAGES-deep
    shared-memory ring guarded by mbarriers (ready: TMA landed; empty: the wgmmas reading it retired);
  * two consumer warpgroups (4 warps each, many registers) each own a whole output tile; of the tiles
    a program gets (persistent, grid = #SMs, grouped order GROUP_M), consumer 0 takes the even ones and
    consumer 1 the odd ones;
  * an "order barrier" pair makes the two mainloops take turns: a consumer waits for its turn, issues all
    the wgmmas of its tile, then passes the turn, and runs its epilogue (bias, GELU, bf16, smem, TMA
    store) while the other consumer's wgmmas keep the tensor cores busy.

Variants (CONFIGS below): ping-pong with tile 128x128 or 64x256 per consumer, 4-5 stages, GROUP_M 8 or 16,
two register splits; the same kernel without GELU (what the epilogue still costs) and with ONE consumer
(no ping-pong: what the overlap buys). And a cooperative kernel (KIND="coop"): two MMA warpgroups share
one 256 x 128 tile (so B is read once for 256 rows) and hand the finished tile, as bf16 in shared memory,
to a third warpgroup that adds the bias, applies GELU and sends it out by TMA, 16 rows at a time, while
the MMA warpgroups run the next tile. Every variant is checked against torch (fp32 reference -> bf16) on
a small shape and the real shape, then timed with triton.testing.do_bench in 4 rounds (each variant once
per round, order rotated; mean and median) against cuBLAS F.linear and cuBLAS F.linear + F.gelu. A failing
variant prints FAIL and the first lines of its exception; the others still run. Results go to argv[1] as
JSON (per variant: config, checks with max error / registers / spills / shared memory, times); further
arguments keep only the variants whose names contain one of them. The whole run takes under a minute.

Seen on the H200 (triton 3.6, two runs): ping-pong 128x128x64 0.442-0.453 ms (~620 TFLOP/s), its no-GELU
twin 0.42-0.46 ms (the GELU epilogue is hidden), one-consumer ws 0.51-0.55 ms, cuBLAS alone 0.396-0.408 ms,
cuBLAS + F.gelu 0.483-0.491 ms.

The cooperative kernel (2026-12-01, same run as cuBLAS 0.409 / 0.491): 0.452-0.469 ms with GELU,
0.442 without, against the ping-pong's 0.442 and 0.432: sharing B does not make the main loop faster.
Its 128 x 256 form (m64n256 wgmmas, CUTLASS's and cuBLAS's tile) does not compile: 4 + 8 + 1 warps
round up to 16, which leaves 128 registers per thread at launch, and ptxas needs 154 for an m64n256
accumulator. Why cuBLAS is ahead: its kernel here is `nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA`
(cooperative 256 x 128, 4 stages, a 1 x 2 cluster whose CTAs share loads by TMA multicast, which
triton 3.6's Gluon does not have), and these GEMMs run at the H200's 700 W power cap (nvidia-smi: SW
power cap active, SM clock 1485-1665 MHz instead of 1980): a GEMM's speed is its energy per FLOP, so
the GELU costs time even where it is hidden, and so does the extra shared-memory and L2 traffic of
a 128-wide tile without multicast. The same cuBLAS GEMM takes 0.355 ms in a 5 ms burst (do_bench
rep=5, before the cap engages) and 0.410 ms sustained (rep=100).

The interleaved kernel (KIND="interleaved"): cooperative 128 x 256 tiles, each consumer warpgroup
64 x 256 (m64n256 wgmmas, registers as the ping-pong kernel's), and the previous tile's epilogue done
in the gaps of the next tile's main loop: the accumulator is staged in shared memory as bf16, and
while each k step's wgmmas run asynchronously the consumer finishes two staged rows (bias, GELU,
pointer stores). Three runs of 2026-12-01 (4, 6 and 2 rounds): 0.439 / 0.438 / 0.491 ms with GELU
against the ping-pong kernel's 0.449 / 0.441 / 0.436, and 0.418 / 0.437 without (ping-pong 0.420 / 0.426; cuBLAS
0.398 / 0.402). GROUP_M 16 matters (8: 0.463-0.466), BK 32 with 6 stages is slower (0.514). At best
1-2% ahead of the ping-pong kernel and less steady, so pipec keeps the ping-pong one.

pipec's codegen writes this schedule (5 stages, GROUP_M=16, descriptors made on the device, the
epilogue its own) as the `pingpong` alternative of a GEMM choice group:
packages/codegen-triton/src/pipec_codegen_triton/matmul_gluon.py. In the suite run of
2026-12-01 the MLP's GEMM1 choice timed it at 0.417 ms against 0.468 for the template and 0.461
for cuBLAS + GELU (wall clock).

Written for triton 3.6's Gluon API (the GPU machine); the small shims below let it import and compile
with later Gluon versions too (tma.async_copy_* was renamed to tma.async_load / tma.async_store).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback

import torch
import torch.nn.functional as F
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_wait

try:  # host-side TMA descriptor that carries a Gluon shared layout
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # pragma: no cover - older layouts of the package
    from triton.tools.tensor_descriptor import TensorDescriptor

# --- API shims: triton 3.6 names first, later names as fallback ----------------------------------------
# 3.6 has only tma.async_copy_global_to_shared / async_copy_shared_to_global; later versions keep those
# names as stubs that raise, so prefer the new names when they exist.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

M_DEFAULT, N_DEFAULT, K_DEFAULT = 8192, 8192, 2048

# One dict per variant; the GPU run sweeps them all. Keys left out take DEFAULTS. CREGS / PREGS are the
# setmaxnreg hints of the consumer-1 and producer partitions; consumer 0 (the default partition) gets
# what is left of maxnreg (see launch_options).
DEFAULTS = dict(KIND="pingpong", BK=64, GROUP_M=8, CONSUMERS=2, GELU=True, CREGS=232, PREGS=40, MREGS=208, EPI_M=16)
CONFIGS = [
    dict(name="pingpong 128x128x64 s4", BM=128, BN=128, STAGES=4),
    dict(name="pingpong 128x128x64 s5", BM=128, BN=128, STAGES=5),
    dict(name="pingpong 128x128x64 s5 G16", BM=128, BN=128, STAGES=5, GROUP_M=16),
    dict(name="pingpong 128x128x64 s5 r240/24", BM=128, BN=128, STAGES=5, CREGS=240, PREGS=24),
    dict(name="pingpong 64x256x64 s4", BM=64, BN=256, STAGES=4),
    dict(name="pingpong 128x128x64 s5 no-GELU", BM=128, BN=128, STAGES=5, GELU=False),
    dict(name="1-consumer ws 128x128x64 s4", BM=128, BN=128, STAGES=4, CONSUMERS=1),
    # cooperative: two MMA warpgroups share a 256-row tile, a third warpgroup runs the epilogue
    # cooperative 128 x 256 (m64n256 per consumer), the previous tile's epilogue interleaved in the main loop
    dict(name="interleaved 128x256x64 s3", KIND="interleaved", BM=128, BN=256, STAGES=3),
    dict(name="interleaved 128x256x64 s3 G16", KIND="interleaved", BM=128, BN=256, STAGES=3, GROUP_M=16),
    dict(name="interleaved 128x256x64 s3 G32", KIND="interleaved", BM=128, BN=256, STAGES=3, GROUP_M=32),
    dict(name="interleaved 128x256x32 s6 G16", KIND="interleaved", BM=128, BN=256, BK=32, STAGES=6, GROUP_M=16),
    dict(name="interleaved 128x256x64 s3 no-GELU", KIND="interleaved", BM=128, BN=256, STAGES=3, GELU=False),
    dict(name="coop 256x128x64 s3", KIND="coop", BM=256, BN=128, STAGES=3),
    dict(name="coop 256x128x64 s3 G16", KIND="coop", BM=256, BN=128, STAGES=3, GROUP_M=16),
    dict(name="coop 256x128x64 s3 r200", KIND="coop", BM=256, BN=128, STAGES=3, MREGS=200),
    dict(name="coop 256x128x32 s6", KIND="coop", BM=256, BN=128, BK=32, STAGES=6),
    dict(name="coop 256x128x64 s3 no-GELU", KIND="coop", BM=256, BN=128, STAGES=3, GELU=False),
]
CONFIGS = [dict(DEFAULTS, **cfg) for cfg in CONFIGS]


# --- device code ---------------------------------------------------------------------------------------
@gluon.jit
def _gelu_exact(x):
    # pipec's exact-GELU form (erfc via the A&S 7.1.26-style polynomial in t = 1 / (1 + p|x|)),
    # accurate to ~3e-7; rsqrt(..)^2 gives the reciprocal with one MUFU op.
    r = gl.rsqrt(1.0 + 0.2316418882663604 * gl.abs(x))
    t = r * r
    p = 0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    erfc = t * p * gl.exp2(x * x * -0.7213475204444817)
    return 0.5 * x * gl.where(x >= 0, 2.0 - erfc, erfc)


@gluon.jit
def _tile_coords(t, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    # Grouped order: GROUP_M row-tiles share each W column-tile while it is hot in L2.
    width = GROUP_M * num_pid_n
    first_m = (t // width) * GROUP_M
    group_size = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (t % group_size)
    pid_n = (t % width) // group_size
    return pid_m, pid_n


@gluon.jit
def _producer(a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K,
              GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    # Loads every k-step of every tile of this program, in tile order; the consumers take the tiles in
    # the same order (their mainloops are serialized by the order barriers), so one ring counter works.
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    STAGE_BYTES: gl.constexpr = (BM + BN) * BK * 2  # bf16 A + W tiles
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    counter = 0
    for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_coords(t, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        for kk in range(k_tiles):
            s = counter % STAGES
            # Fresh mbarriers count as "phase 1 complete", so the first lap through the ring does not wait.
            mbarrier.wait(empty_bars.index(s), ((counter // STAGES) & 1) ^ 1)
            mbarrier.expect(ready_bars.index(s), STAGE_BYTES)
            _tma_load(a_desc, [off_m, kk * BK], ready_bars.index(s), a_bufs.index(s))
            _tma_load(b_desc, [off_n, kk * BK], ready_bars.index(s), b_bufs.index(s))
            counter += 1


@gluon.jit
def _mma_k_steps(a_bufs, b_bufs, ready_bars, empty_bars, acc, counter, k_tiles, STAGES: gl.constexpr):
    # One tile's k steps from ring position `counter`: wgmmas issued asynchronously, one kept in flight (the
    # one before it has retired, so its stage is handed back to the producer). The last one is left in
    # flight: the caller waits for it and frees its stage (-> the accumulator and that stage).
    prev_s = 0
    for kk in range(k_tiles):
        s = counter % STAGES
        mbarrier.wait(ready_bars.index(s), (counter // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s).permute((1, 0)), acc, use_acc=kk > 0, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc, ))
        if kk > 0:
            mbarrier.arrive(empty_bars.index(prev_s), count=1)
        prev_s = s
        counter += 1
    return acc, prev_s


@gluon.jit
def _consumer(CID: gl.constexpr, a_desc, b_desc, c_desc, bias_ptr, a_bufs, b_bufs, c_bufs,
              ready_bars, empty_bars, order_bars, M, N, K,
              GROUP_M: gl.constexpr, STAGES: gl.constexpr, NUM_CONSUMERS: gl.constexpr,
              APPLY_GELU: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    # One warpgroup holds the whole BM x BN fp32 accumulator: wgmma m64nNk16 atoms, 4 warps along M.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BN, 16])
    bias_layout: gl.constexpr = gl.SliceLayout(0, acc_layout)
    c_smem = c_bufs.index(CID)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    nprog = gl.num_programs(0)
    j = 0  # tiles this consumer has done
    for t in range(gl.program_id(0) + CID * nprog, num_pid_m * num_pid_n, NUM_CONSUMERS * nprog):
        pid_m, pid_n = _tile_coords(t, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        # Ring position of this tile's first k-step: the program's tiles are interleaved between consumers.
        counter = (j * NUM_CONSUMERS + CID) * k_tiles
        # Fetch the bias before the mainloop so its latency hides behind the wgmmas.
        bias = gl.load(bias_ptr + off_n + gl.arange(0, BN, layout=bias_layout))

        if NUM_CONSUMERS > 1:
            # Wait for our turn on the tensor cores. Consumer 0's first wait passes at once (fresh barrier,
            # parity 1); afterwards each turn is handed over by the other consumer's arrive.
            mbarrier.wait(order_bars.index(CID), (j & 1) ^ (1 - CID))

        acc = gl.zeros([BM, BN], gl.float32, layout=acc_layout)
        acc, prev_s = _mma_k_steps(a_bufs, b_bufs, ready_bars, empty_bars, acc, counter, k_tiles, STAGES)
        if NUM_CONSUMERS > 1:
            # All wgmmas of this tile are issued: hand the tensor cores to the other consumer now, before
            # draining, so its first wgmmas queue right behind ours.
            mbarrier.arrive(order_bars.index((CID + 1) % NUM_CONSUMERS), count=1)
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        mbarrier.arrive(empty_bars.index(prev_s), count=1)

        # Epilogue, overlapped with the other consumer's mainloop.
        x = acc + gl.expand_dims(bias.to(gl.float32), 0)
        if APPLY_GELU:
            x = _gelu_exact(x)
        # The previous TMA store from c_smem was issued a whole mainloop ago; make sure it has read it.
        tma.store_wait(0)
        c_smem.store(x.to(c_desc.dtype))
        fence_async_shared()  # generic-proxy smem writes -> async-proxy (TMA) read
        _tma_store(c_desc, [off_m, off_n], c_smem)
        j += 1
    tma.store_wait(0)


@gluon.jit
def gemm_bias_gelu_pingpong_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                                   GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                                   NUM_CONSUMERS: gl.constexpr, APPLY_GELU: gl.constexpr,
                                   CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    # One output staging tile per consumer, so one's TMA store never waits on the other's epilogue.
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [NUM_CONSUMERS] + c_desc.block_type.shape, c_desc.layout)
    ready_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    order_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready_bars.index(i), count=1)  # completed by the TMA transaction count
        mbarrier.init(empty_bars.index(i), count=1)  # one arrive from the consuming warpgroup
    for i in gl.static_range(2):
        mbarrier.init(order_bars.index(i), count=1)

    producer_args = (a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K, GROUP_M, STAGES)
    if NUM_CONSUMERS == 2:
        gl.warp_specialize([
            (_consumer, (0, a_desc, b_desc, c_desc, bias_ptr, a_bufs, b_bufs, c_bufs, ready_bars, empty_bars,
                         order_bars, M, N, K, GROUP_M, STAGES, NUM_CONSUMERS, APPLY_GELU)),
            (_consumer, (1, a_desc, b_desc, c_desc, bias_ptr, a_bufs, b_bufs, c_bufs, ready_bars, empty_bars,
                         order_bars, M, N, K, GROUP_M, STAGES, NUM_CONSUMERS, APPLY_GELU)),
            (_producer, producer_args),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (0, a_desc, b_desc, c_desc, bias_ptr, a_bufs, b_bufs, c_bufs, ready_bars, empty_bars,
                         order_bars, M, N, K, GROUP_M, STAGES, NUM_CONSUMERS, APPLY_GELU)),
            (_producer, producer_args),
        ], [1], [PRODUCER_REGS])


@gluon.jit
def _coop_mma(a_desc, b_desc, a_bufs, b_bufs, c_smem, ready_bars, empty_bars, acc_ready, epi_free, M, N, K,
              GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    # Two warpgroups (8 warps) share one BM x BN tile: each holds BM / 2 rows of the fp32 accumulator,
    # both read the same B stage. With BM = 128, BN = 256 each wgmma is m64n256k16: per FLOP it reads
    # the least shared memory (CUTLASS's cooperative 128x256 tile).
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1],
                                                         instr_shape=[16, BN, 16])
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    counter = 0
    j = 0
    for _tile in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):  # tile order: the producer's
        acc = gl.zeros([BM, BN], gl.float32, layout=acc_layout)
        acc, prev_s = _mma_k_steps(a_bufs, b_bufs, ready_bars, empty_bars, acc, counter, k_tiles, STAGES)
        counter += k_tiles
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        mbarrier.arrive(empty_bars.index(prev_s), count=1)
        # Hand the tile to the epilogue warpgroup once it has sent the previous one out, then go straight
        # on to the next tile's wgmmas (the producer has been filling the ring meanwhile).
        mbarrier.wait(epi_free, (j & 1) ^ 1)
        c_smem.store(acc.to(c_smem.dtype))
        mbarrier.arrive(acc_ready, count=1)
        j += 1


@gluon.jit
def _coop_epilogue(c_desc, bias_ptr, c_smem, acc_ready, epi_free, M, N,
                   BM: gl.constexpr, GROUP_M: gl.constexpr, APPLY_GELU: gl.constexpr):
    # One warpgroup: bias + GELU on the staged tile, EPI_M rows at a time, written back in place and sent
    # out by TMA, while the MMA warpgroups already run the next tile.
    EPI_M: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    # 16-byte vectors along a row; a warp spans the BN columns (8 elements x BN // 8 threads)
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [256 // BN, BN // 8], [4, 1], [1, 0])
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    j = 0
    for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_coords(t, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        bias = gl.load(bias_ptr + off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))).to(gl.float32)
        mbarrier.wait(acc_ready, j & 1)
        for r in gl.static_range(BM // EPI_M):
            part = c_smem.slice(r * EPI_M, EPI_M)
            x = part.load(layout).to(gl.float32) + gl.expand_dims(bias, 0)
            if APPLY_GELU:
                x = _gelu_exact(x)
            part.store(x.to(c_desc.dtype))
            fence_async_shared()
            _tma_store(c_desc, [off_m + r * EPI_M, off_n], part)
        tma.store_wait(0)  # the TMA unit has read the staging tile: the MMA warps may overwrite it
        mbarrier.arrive(epi_free, count=1)
        j += 1


@gluon.jit
def _coop_producer(a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K,
                   GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    _producer(a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K, GROUP_M, STAGES)


@gluon.jit
def gemm_bias_gelu_coop_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                               GROUP_M: gl.constexpr, STAGES: gl.constexpr, APPLY_GELU: gl.constexpr,
                               MMA_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    dtype: gl.constexpr = a_desc.dtype
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [BM, BN], c_desc.layout)
    ready_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    acc_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    epi_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready_bars.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=1)
    mbarrier.init(acc_ready, count=1)
    mbarrier.init(epi_free, count=1)
    gl.warp_specialize([
        (_coop_epilogue, (c_desc, bias_ptr, c_smem, acc_ready, epi_free, M, N, BM, GROUP_M, APPLY_GELU)),
        (_coop_mma, (a_desc, b_desc, a_bufs, b_bufs, c_smem, ready_bars, empty_bars, acc_ready, epi_free,
                     M, N, K, GROUP_M, STAGES)),
        (_coop_producer, (a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K, GROUP_M, STAGES)),
    ], [8, 1], [MMA_REGS, PRODUCER_REGS])


@gluon.jit
def _ilv_chunk(mine, ch, c_ptr, bias_ptr, off_m, off_n, N, R: gl.constexpr, BN: gl.constexpr,
               APPLY_GELU: gl.constexpr):
    # Bias + GELU on staged rows [ch * R, ch * R + R) of this consumer's half of the previous tile (a flat
    # row-major chunk of R * BN elements), stored with pointers: 4 consecutive elements per thread.
    EPI: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])
    idx = gl.arange(0, R * BN, layout=EPI)
    cols = off_n + idx % BN
    rows = off_m + ch * R + idx // BN
    x = mine.index(ch).load(EPI).to(gl.float32) + gl.load(bias_ptr + cols).to(gl.float32)
    if APPLY_GELU:
        x = _gelu_exact(x)
    gl.store(c_ptr + rows * N + cols, x.to(gl.bfloat16))


@gluon.jit
def _ilv_consumer(CID: gl.constexpr, a_bufs, b_bufs, mine, ready_bars, empty_bars, c_ptr, bias_ptr, M, N, K,
                  BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
                  STAGES: gl.constexpr, R: gl.constexpr, APPLY_GELU: gl.constexpr):
    # Cooperative: both consumers take every tile, each BM / 2 rows (m64n256 wgmmas), sharing the B stage.
    # The previous tile's epilogue runs in the gaps of this tile's main loop: while a k step's wgmmas run
    # asynchronously, the warps finish R staged rows of the previous tile (bias, GELU, store).
    HALF: gl.constexpr = BM // 2
    NCHUNK: gl.constexpr = HALF // R
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BN, 16])
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    counter = 0
    j = 0
    prev_m = 0
    prev_n = 0
    for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_coords(t, num_pid_m, num_pid_n, GROUP_M)
        acc = gl.zeros([HALF, BN], gl.float32, layout=acc_layout)
        prev_s = 0
        for kk in range(k_tiles):
            s = counter % STAGES
            mbarrier.wait(ready_bars.index(s), (counter // STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(s).slice(CID * HALF, HALF), b_bufs.index(s).permute((1, 0)), acc,
                                use_acc=kk > 0, is_async=True)
            if j > 0:
                if kk < NCHUNK:
                    _ilv_chunk(mine, kk, c_ptr, bias_ptr, prev_m, prev_n, N, R, BN, APPLY_GELU)
            acc = warpgroup_mma_wait(1, deps=(acc, ))
            if kk > 0:
                mbarrier.arrive(empty_bars.index(prev_s), count=1)
            prev_s = s
            counter += 1
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        mbarrier.arrive(empty_bars.index(prev_s), count=1)
        if j > 0:
            for ch in range(k_tiles, NCHUNK):  # rows the main loop had no k steps for (a short K)
                _ilv_chunk(mine, ch, c_ptr, bias_ptr, prev_m, prev_n, N, R, BN, APPLY_GELU)
        rows_view: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])
        mine._reinterpret(gl.bfloat16, [HALF, BN], rows_view).store(acc.to(gl.bfloat16))
        prev_m = pid_m * BM + CID * HALF
        prev_n = pid_n * BN
        j += 1
    if j > 0:  # the last tile's rows
        for ch in range(NCHUNK):
            _ilv_chunk(mine, ch, c_ptr, bias_ptr, prev_m, prev_n, N, R, BN, APPLY_GELU)


@gluon.jit
def gemm_bias_gelu_interleaved_kernel(a_desc, b_desc, c_ptr, bias_ptr, M, N, K,
                                      GROUP_M: gl.constexpr, STAGES: gl.constexpr, R: gl.constexpr,
                                      APPLY_GELU: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                                      PRODUCER_REGS: gl.constexpr):
    dtype: gl.constexpr = a_desc.dtype
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    # each consumer's staged half of the previous tile, row-major and unswizzled: chunks of R rows
    flat: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
    stage0 = gl.allocate_shared_memory(gl.bfloat16, [BM // 2 // R, R * BN], flat)
    stage1 = gl.allocate_shared_memory(gl.bfloat16, [BM // 2 // R, R * BN], flat)
    ready_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready_bars.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=2)  # both consumers read every stage
    gl.warp_specialize([
        (_ilv_consumer, (0, a_bufs, b_bufs, stage0, ready_bars, empty_bars, c_ptr, bias_ptr, M, N, K, BM, BN, BK,
                         GROUP_M, STAGES, R, APPLY_GELU)),
        (_ilv_consumer, (1, a_bufs, b_bufs, stage1, ready_bars, empty_bars, c_ptr, bias_ptr, M, N, K, BM, BN, BK,
                         GROUP_M, STAGES, R, APPLY_GELU)),
        (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K, GROUP_M, STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# --- host side -----------------------------------------------------------------------------------------
def smem_layouts(cfg: dict):
    """NVMMA (128B-swizzled) shared layouts for the A, W and C tiles of a config."""
    bm, bn, bk = cfg["BM"], cfg["BN"], cfg["BK"]
    a = gl.NVMMASharedLayout.get_default_for([bm, bk], gl.bfloat16)
    b = gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16)
    c = gl.NVMMASharedLayout.get_default_for([c_block(cfg)[0], bn], gl.bfloat16)
    return a, b, c


def c_block(cfg: dict) -> list[int]:
    """The output's TMA box: the whole tile (ping-pong) or the epilogue warpgroup's rows (coop)."""
    return [cfg["EPI_M"] if cfg["KIND"] == "coop" else cfg["BM"], cfg["BN"]]


def launch_options(cfg: dict) -> dict:
    """num_warps is the default partition (consumer 0); the register cap decides setmaxnreg's budget."""
    if cfg["KIND"] == "interleaved":
        return dict(num_warps=4, maxnreg=168)  # as the ping-pong kernel: 3 warpgroups, 232 / 232 / 40
    if cfg["KIND"] == "coop":
        # 4 (epilogue) + 8 (MMA) + 1 (producer) warps round up to 4 warpgroups: 65536 / 512 -> 128; the
        # epilogue keeps what the others leave: 4 * 128 - 2 * MREGS - PREGS.
        return dict(num_warps=4, maxnreg=128)
    if cfg["CONSUMERS"] == 2:
        # 4 + 4 + 1 warps round up to 3 warpgroups: 65536 regs / 384 threads -> 168 (multiple of 8).
        return dict(num_warps=4, maxnreg=168)
    return dict(num_warps=4, maxnreg=256)  # 4 + 1 warps round up to 2 warpgroups


def constexprs(cfg: dict) -> dict:
    if cfg["KIND"] == "interleaved":
        return dict(GROUP_M=cfg["GROUP_M"], STAGES=cfg["STAGES"], R=2, APPLY_GELU=cfg["GELU"],
                    CONSUMER_REGS=cfg["CREGS"], PRODUCER_REGS=cfg["PREGS"])
    if cfg["KIND"] == "coop":
        return dict(GROUP_M=cfg["GROUP_M"], STAGES=cfg["STAGES"], APPLY_GELU=cfg["GELU"],
                    MMA_REGS=cfg["MREGS"], PRODUCER_REGS=24)
    return dict(GROUP_M=cfg["GROUP_M"], STAGES=cfg["STAGES"], NUM_CONSUMERS=cfg["CONSUMERS"],
                APPLY_GELU=cfg["GELU"], CONSUMER_REGS=cfg["CREGS"], PRODUCER_REGS=cfg["PREGS"])


def make_runner(cfg: dict, a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, c: torch.Tensor):
    """Builds the descriptors once and returns a zero-argument launch (what do_bench times)."""
    m, k = a.shape
    n = w.shape[0]
    bm, bn, bk = cfg["BM"], cfg["BN"], cfg["BK"]
    if m % bm or n % bn or k % bk:
        raise ValueError(f"shape {m}x{n}x{k} is not a multiple of the tile {bm}x{bn}x{bk}")
    a_layout, b_layout, c_layout = smem_layouts(cfg)
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk], a_layout)
    b_desc = TensorDescriptor.from_tensor(w, [bn, bk], b_layout)
    c_desc = TensorDescriptor.from_tensor(c, c_block(cfg), c_layout)
    num_sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (min(num_sms, (m // bm) * (n // bn)), )
    kwargs = dict(constexprs(cfg), **launch_options(cfg))

    kernel = gemm_bias_gelu_coop_kernel if cfg["KIND"] == "coop" else gemm_bias_gelu_pingpong_kernel
    if cfg["KIND"] == "interleaved":  # stores through pointers: no output descriptor

        def run():
            return gemm_bias_gelu_interleaved_kernel[grid](a_desc, b_desc, c, bias, m, n, k, **kwargs)

        return run

    def run():
        return kernel[grid](a_desc, b_desc, c_desc, bias, m, n, k, **kwargs)

    return run


def kernel_stats(compiled) -> dict:
    """Registers, spills and shared memory of a compiled kernel, where this triton exposes them."""
    out = {}
    for key in ("n_regs", "n_spills"):
        out[key] = getattr(compiled, key, None)
    meta = getattr(compiled, "metadata", None)
    out["shared"] = getattr(meta, "shared", None) if meta is not None else None
    return out


def reference(a, w, bias, gelu: bool):
    y = F.linear(a.float(), w.float(), bias.float())
    return (F.gelu(y, approximate="none") if gelu else y).to(torch.bfloat16)


def make_inputs(m: int, n: int, k: int, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    # Scaled like nn.Linear's init so the pre-activation is O(1) and GELU's curved part is exercised.
    w = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * k**-0.5).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    return a, w, bias


def check(cfg: dict, m: int, n: int, k: int) -> dict:
    a, w, bias = make_inputs(m, n, k, seed=m + n + k)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)  # unwritten tiles show up
    compiled = make_runner(cfg, a, w, bias, c)()
    torch.cuda.synchronize()
    want = reference(a, w, bias, cfg["GELU"])
    err = (c.float() - want.float()).abs().max().item()
    torch.testing.assert_close(c, want, atol=2e-2, rtol=2e-2)
    return {"shape": [m, n, k], "max_abs_err": err, **kernel_stats(compiled)}


def short_exc(exc: BaseException, lines: int = 6) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    return "\n".join(text[:lines])


def bench_rounds(fns: dict, rounds: int = int(os.environ.get("ROUNDS", 4))) -> dict:
    """Each variant once per round, order rotated, so clock/thermal drift hits all of them alike."""
    from triton.testing import do_bench

    names = list(fns)
    times = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            try:
                times[name].append(do_bench(fns[name], warmup=25, rep=100, return_mode="median"))
            except Exception as exc:  # noqa: BLE001 - keep the other variants running
                print(f"  {name}: timing FAILED: {short_exc(exc, 2)}", flush=True)
    return times


def summarize(ms_list):
    if not ms_list:
        return None, None
    s = sorted(ms_list)
    mid = len(s) // 2
    median = s[mid] if len(s) % 2 else 0.5 * (s[mid - 1] + s[mid])
    return sum(s) / len(s), median


def main() -> None:
    out_path = sys.argv[1] if len(sys.argv) > 1 else "gemm_gluon.json"
    if not torch.cuda.is_available():
        raise SystemExit("gemm_gluon.py needs a CUDA GPU (Hopper)")
    m, n, k = M_DEFAULT, N_DEFAULT, K_DEFAULT
    flops = 2.0 * m * n * k
    print(f"C = GELU(A @ W^T + bias), bf16, M={m} N={n} K={k} on {torch.cuda.get_device_name()}, "
          f"triton {triton.__version__}, torch {torch.__version__}", flush=True)
    result = {"shape": [m, n, k], "device": torch.cuda.get_device_name(), "triton": triton.__version__,
              "torch": torch.__version__, "python": platform.python_version(), "variants": {}}

    a, w, bias = make_inputs(m, n, k)
    fns = {
        "cuBLAS F.linear (no GELU)": lambda: F.linear(a, w, bias),
        "cuBLAS F.linear + F.gelu": lambda: F.gelu(F.linear(a, w, bias), approximate="none"),
    }
    only = sys.argv[2:]  # optional name filters: run the variants whose name contains one of them
    for cfg in CONFIGS:
        name = cfg["name"]
        if only and not any(word in name for word in only):
            continue
        row = {"config": cfg, "checks": []}
        result["variants"][name] = row
        start = time.perf_counter()
        try:
            for shape in ((512, 512, 256), (m, n, k)):
                row["checks"].append(check(cfg, *shape))
            row["ok"] = True
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            fns[name] = make_runner(cfg, a, w, bias, c)
            stats = row["checks"][-1]
            print(f"  ok    {name:<34} regs {stats['n_regs']} spills {stats['n_spills']} smem {stats['shared']} "
                  f"max err {stats['max_abs_err']:.2e} ({time.perf_counter() - start:.1f} s)", flush=True)
        except Exception as exc:  # noqa: BLE001 - one broken config must not stop the sweep
            row["ok"] = False
            row["error"] = short_exc(exc, 20)
            print(f"  FAIL  {name}: {short_exc(exc)}", flush=True)

    times = bench_rounds(fns)
    base = summarize(times["cuBLAS F.linear + F.gelu"])[1]
    print(f"\n{'variant':<36} {'mean ms':>8} {'median':>8} {'TFLOP/s':>8} {'vs cuBLAS+gelu':>15}")
    for name, ms_list in times.items():
        mean, median = summarize(ms_list)
        entry = result["variants"].setdefault(name, {})
        entry.update(ms=ms_list, mean_ms=mean, median_ms=median,
                     tflops=flops / median / 1e9 if median else None)
        if median:
            speedup = base / median if base else float("nan")
            print(f"{name:<36} {mean:8.4f} {median:8.4f} {flops / median / 1e9:8.1f} {speedup:14.2f}x")
    with open(out_path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
