"""The GEMM template's ping-pong kernel, written in Gluon (Hopper): one tile's epilogue runs while
the next tile's MMAs do.

The Triton template's persistent TMA kernel runs its epilogue on the warps that issue the MMAs, so
the tensor cores idle during it: the exact GELU of a bf16 Linear costs a quarter more cycles than
no epilogue, and neither Triton's warp specialization nor two programs per SM hid it (matmul_tma.py). This kernel is scheduled by hand, as CUTLASS's
`KernelTmaWarpSpecializedPingpong`:

- a producer warp streams A and B tiles through TMA into a STAGES-deep shared-memory ring
  (mbarriers: `ready` when a stage landed, `empty` when the MMAs reading it retired);
- two consumer warpgroups each own a whole BLOCK_M x BLOCK_N output tile: of the tiles a program
  walks (persistent, grouped order), consumer 0 takes the even ones and consumer 1 the odd ones;
- an order barrier pair makes their main loops take turns: a consumer waits for its turn, issues
  all its tile's wgmmas, passes the turn, then drains them and runs the epilogue while the other
  consumer's wgmmas keep the tensor cores busy.

It beats cuBLAS + a GELU pass, the template and one consumer without overlap on that GEMM
(docs/performance.md, "The Gluon ping-pong kernel"). The epilogue is pipec's own (the `EpilogueWriter` lines the Triton
template uses), spelled in Gluon: `tl.` calls become `gl.`; a constant tile (`tl.full`) or
a broadcast scalar gets the accumulator's layout, and `tl.sigmoid` (tanh-GELU, SiLU) becomes
the same arithmetic spelled out. An epilogue calling libdevice gets no ping-pong kernel. A
Gluon kernel cannot run in Triton's CPU interpreter: it is a choice-group alternative, never
the default, so it runs only where the runtime times alternatives on a GPU (sm_90).
"""

from __future__ import annotations

import re

from pipec_ir import MAXNREG_CONSTANT, TMA_CONSTANT, LaunchConfig

from .matmul_tma import TmaOperand, persistent_split

# The tile of each consumer and the ring's depth: experiments/gemm_gluon.py's best (docs/performance.md).
# 128 x 128 fp32 accumulators are 128 registers per thread of a warpgroup; 5 stages of A and B
# (160 KB) and two 32 KB output tiles fill the 227 KB of shared memory per block.
BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES = 128, 128, 64, 16, 5
# Launch: num_warps is the default partition (consumer 0); consumer 1 (4 warps) and the producer
# (1 warp) are its workers. The three warpgroups share 64 K registers: 168 per thread at launch,
# then `setmaxnreg` moves them to the consumers (232 each) from the producer (40).
NUM_WARPS, MAX_REGISTERS, CONSUMER_REGISTERS, PRODUCER_REGISTERS = 4, 168, 232, 40

# `gl` has these with `tl`'s meaning; an epilogue calling anything else gets no Gluon kernel.
_GLUON_CALLS = frozenset({
    "load", "store", "where", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "maximum", "minimum",
    "fma", "sin", "cos", "erf", "floor", "ceil", "float32", "float16", "bfloat16", "int1", "int8", "int16",
    "int32", "int64", "uint8",
})
# ... and these `tl` calls it spells differently: a tensor made in Gluon needs its layout (the
# accumulator's, `ACC`, for the epilogue's whole tile), and Gluon has no sigmoid (Triton's is
# `1 / (1 + exp(-x))`: `_pipec_sigmoid` below, the same arithmetic)
_TILE = "[BLOCK_M, BLOCK_N]"
_RESPELLED = frozenset({"full", "broadcast_to", "sigmoid"})

SIGMOID_HELPER = """
@gluon.jit
def _pipec_sigmoid(x):
    # Triton's sigmoid, the same arithmetic (Gluon has none)
    return 1 / (1 + gl.exp(-x))
"""


def gluon_lines(lines: list[str], in_tile: bool = True) -> list[str] | None:
    """Triton epilogue lines (`in_tile`: in the consumer, beside `acc` and `ACC`) or helper
    functions spelled in Gluon, or None when one calls a function Gluon has no spelling for here
    (libdevice; `full` or `broadcast_to` outside the tile, or of another shape than the tile's)."""
    text = "\n".join(lines)
    if "libdevice." in text:
        return None
    if any(name not in _GLUON_CALLS | _RESPELLED for name in re.findall(r"\btl\.(\w+)", text)):
        return None
    out = []
    for line in lines:
        line = _respell_calls(line, in_tile)
        if line is None:
            return None
        out.append(re.sub(r"\btl\.", "gl.", line).replace("@triton.jit", "@gluon.jit"))
    return out


def _respell_calls(line: str, in_tile: bool) -> str | None:
    """`tl.full(TILE, v, t)` -> `gl.full(TILE, v, t, layout=ACC)`, `tl.broadcast_to(x, TILE)` ->
    `gl.broadcast(x, acc)[0]` (the accumulator's shape and layout), `tl.sigmoid(` ->
    `_pipec_sigmoid(`; None for a `full` or `broadcast_to` of another shape."""
    line = line.replace("tl.sigmoid(", "_pipec_sigmoid(")
    for name in ("full", "broadcast_to"):
        start = line.find(f"tl.{name}(")
        if start >= 0 and not in_tile:
            return None
        while start >= 0:
            args_at = start + len(name) + 4
            end = _closing_paren(line, args_at - 1)
            args = line[args_at:end]
            if name == "full" and args.startswith(_TILE + ", "):
                call = f"gl.full({args}, layout=ACC)"
            elif name == "broadcast_to" and args.endswith(", " + _TILE):
                call = f"gl.broadcast({args[:-len(_TILE) - 2]}, acc)[0]"
            else:
                return None
            line = line[:start] + call + line[end + 1:]
            start = line.find(f"tl.{name}(", start + len(call))
    return line


def _closing_paren(text: str, opening: int) -> int:
    depth = 0
    for i in range(opening, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"unbalanced parentheses in generated line: {text!r}")


# 128-byte swizzle: every tile's rows here are a multiple of 128 bytes (64+ 16-bit elements)
_SHARED_LAYOUT = "gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)"


def pingpong_source(name: str, doc: str, params: list[str], a: TmaOperand, b: TmaOperand,
                    epilogue: list[str], helpers: str, tma_store: str | None) -> str:
    """The module source of the ping-pong kernel `name`.

    `params`: the kernel's parameters before the constexprs: a_ptr, b_ptr, then the epilogue's
    pointers and the sizes (M, N, K among them), which the consumers take too. `epilogue`: Gluon
    lines (4 spaces deep) that read `acc`, `rm`, `rn`, `om`, `on` and store every output;
    `tma_store`: the output pointer whose tile leaves through `c_smem` and a TMA copy
    (`store_tile_lines`), if any."""
    at = {"BLOCK_M": "om", "BLOCK_N": "on", "BLOCK_K": "kk * BLOCK_K"}

    def descriptor(var: str, ptr: str, op: TmaOperand) -> str:
        return (f"    {var} = tma.make_tensor_descriptor({ptr}, [{op.shape[0]}, {op.shape[1]}], [{op.stride}, 1], "
                f"[{op.block[0]}, {op.block[1]}], SMEM)")

    def coords(op: TmaOperand) -> str:
        return ", ".join(at[d] for d in op.block)

    b_operand = "b_bufs.index(s).permute((1, 0))" if b.transposed else "b_bufs.index(s)"
    blocks = "BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES"
    block_params = ", ".join(f"{c}: gl.constexpr" for c in blocks.split(", "))
    shared = ", ".join(["a_bufs", "b_bufs", "c_bufs", "ready", "empty", "order", *params[2:], "c_desc"])
    # the output tile's staging buffer, one per consumer (a token one when no output uses TMA)
    c_tile = (f"{tma_store}.dtype.element_ty, [2, BLOCK_M, BLOCK_N]" if tma_store else "dtype, [2, 8, 64]")
    c_desc = (f"tma.make_tensor_descriptor({tma_store}, [M, N], [N, 1], [BLOCK_M, BLOCK_N], SMEM)"
              if tma_store else "a_desc  # unused: no output leaves through TMA")
    lines = [
        "import triton",
        "from triton.experimental import gluon",
        "from triton.experimental.gluon import language as gl",
        "from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,",
        "                                                              warpgroup_mma, warpgroup_mma_wait)",
        "",
        "# triton 3.6 names the TMA copies async_copy_*; later versions async_load / async_store",
        "_tma_load = getattr(tma, 'async_load', None) or tma.async_copy_global_to_shared",
        "_tma_store = getattr(tma, 'async_store', None) or tma.async_copy_shared_to_global",
        f"SMEM: gl.constexpr = {_SHARED_LAYOUT}",
        helpers,
        SIGMOID_HELPER if "_pipec_sigmoid(" in "\n".join(epilogue) + helpers else "",
        "@gluon.jit",
        "def _pipec_tile(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):",
        "    # grouped order: GROUP_M row tiles share B's column tiles while they sit in L2",
        "    in_group = GROUP_M * num_pid_n",
        "    first_m = (tile // in_group) * GROUP_M",
        "    size_m = gl.minimum(num_pid_m - first_m, GROUP_M)",
        "    return first_m + (tile % in_group) % size_m, (tile % in_group) // size_m",
        "",
        "",
        "@gluon.jit",
        f"def {name}_producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, {block_params}):",
        "    # every k step of every tile of this program, in tile order: the consumers take the tiles",
        "    # in that order too (their main loops take turns), so one ring counter serves both",
        "    num_pid_m = gl.cdiv(M, BLOCK_M)",
        "    num_pid_n = gl.cdiv(N, BLOCK_N)",
        "    k_tiles = gl.cdiv(K, BLOCK_K)",
        "    programs = gl.num_programs(0) * gl.num_programs(1)",
        "    first = gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)",
        "    counter = 0",
        "    for tile in range(first, num_pid_m * num_pid_n, programs):",
        "        pid_m, pid_n = _pipec_tile(tile, num_pid_m, num_pid_n, GROUP_M)",
        "        om = pid_m * BLOCK_M",
        "        on = pid_n * BLOCK_N",
        "        for kk in range(k_tiles):",
        "            s = counter % STAGES",
        "            # a fresh mbarrier counts as phase 1 complete: the first lap does not wait",
        "            mbarrier.wait(empty.index(s), ((counter // STAGES) & 1) ^ 1)",
        "            mbarrier.expect(ready.index(s), (BLOCK_M + BLOCK_N) * BLOCK_K * 2)",
        "            # out-of-bounds rows, columns and K are read as zeros by the TMA unit",
        f"            _tma_load(a_desc, [{coords(a)}], ready.index(s), a_bufs.index(s))",
        f"            _tma_load(b_desc, [{coords(b)}], ready.index(s), b_bufs.index(s))",
        "            counter += 1",
        "",
        "",
        "@gluon.jit",
        f"def {name}_consumer(CID: gl.constexpr, {shared}, {block_params}):",
        "    ACC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], "
        "instr_shape=[16, BLOCK_N, 16])",
        "    num_pid_m = gl.cdiv(M, BLOCK_M)",
        "    num_pid_n = gl.cdiv(N, BLOCK_N)",
        "    k_tiles = gl.cdiv(K, BLOCK_K)",
        "    programs = gl.num_programs(0) * gl.num_programs(1)",
        "    first = gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)",
        "    c_smem = c_bufs.index(CID)",
        "    j = 0  # tiles this consumer has done",
        "    for tile in range(first + CID * programs, num_pid_m * num_pid_n, 2 * programs):",
        "        pid_m, pid_n = _pipec_tile(tile, num_pid_m, num_pid_n, GROUP_M)",
        "        om = pid_m * BLOCK_M",
        "        on = pid_n * BLOCK_N",
        "        counter = (2 * j + CID) * k_tiles  # the ring position of this tile's first k step",
        "        # our turn on the tensor cores: consumer 0's first wait passes (a fresh barrier), then",
        "        # each turn is handed over by the other consumer",
        "        mbarrier.wait(order.index(CID), (j & 1) ^ (1 - CID))",
        "        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=ACC)",
        "        prev = 0",
        "        for kk in range(k_tiles):",
        "            s = counter % STAGES",
        "            mbarrier.wait(ready.index(s), (counter // STAGES) & 1)",
        f"            acc = warpgroup_mma(a_bufs.index(s), {b_operand}, acc, use_acc=kk > 0, is_async=True)",
        "            # one wgmma in flight: the one before it retired, so its stage can be refilled",
        "            acc = warpgroup_mma_wait(1, deps=(acc,))",
        "            if kk > 0:",
        "                mbarrier.arrive(empty.index(prev), count=1)",
        "            prev = s",
        "            counter += 1",
        "        # every wgmma of this tile is issued: pass the turn before draining them",
        "        mbarrier.arrive(order.index(1 - CID), count=1)",
        "        acc = warpgroup_mma_wait(0, deps=(acc,))",
        "        mbarrier.arrive(empty.index(prev), count=1)",
        "        rm = om + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ACC))",
        "        rn = on + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, ACC))",
        *["    " + line for line in epilogue],
        "        j += 1",
        "    tma.store_wait(0)",
        "",
        "",
        "@gluon.jit",
        f"def {name}({', '.join(params)}, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, "
        "GROUP_M: gl.constexpr, GRID_M: gl.constexpr, GRID_N: gl.constexpr, TMA: gl.constexpr, "
        f"STAGES: gl.constexpr, {MAXNREG_CONSTANT}: gl.constexpr):",
        f'    """{doc}"""',
        "    dtype: gl.constexpr = a_ptr.dtype.element_ty",
        descriptor("a_desc", "a_ptr", a),
        descriptor("b_desc", "b_ptr", b),
        f"    c_desc = {c_desc}",
        f"    a_bufs = gl.allocate_shared_memory(dtype, [STAGES, {a.block[0]}, {a.block[1]}], SMEM)",
        f"    b_bufs = gl.allocate_shared_memory(dtype, [STAGES, {b.block[0]}, {b.block[1]}], SMEM)",
        f"    c_bufs = gl.allocate_shared_memory({c_tile}, SMEM)",
        "    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())",
        "    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())",
        "    order = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())",
        "    for i in gl.static_range(STAGES):",
        "        mbarrier.init(ready.index(i), count=1)  # completed by the TMA transaction bytes",
        "        mbarrier.init(empty.index(i), count=1)  # one arrive from the consumer that read it",
        "    for i in gl.static_range(2):",
        "        mbarrier.init(order.index(i), count=1)",
        "    gl.warp_specialize([",
        f"        ({name}_consumer, (0, {shared}, {blocks})),",
        f"        ({name}_consumer, (1, {shared}, {blocks})),",
        f"        ({name}_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, {blocks})),",
        f"    ], [4, 1], [{CONSUMER_REGISTERS}, {PRODUCER_REGISTERS}])",
    ]
    return "\n".join(lines) + "\n"


def store_tile_lines(value: str, dtype: str) -> list[str]:
    """An output tile leaving through shared memory and a TMA copy (the consumer's `c_smem`, its
    previous copy waited for first: it was issued a whole main loop ago)."""
    return ["tma.store_wait(0)",
            f"c_smem.store(gl.broadcast({value}, acc)[0].to({dtype}))",
            "fence_async_shared()  # the generic proxy's writes, before the TMA unit reads them",
            "_tma_store(c_desc, [om, on], c_smem)"]


def pingpong_config(m: int, n: int) -> LaunchConfig:
    """The ping-pong kernel's one launch for an m x n product: persistent (TMA set: at most one
    program per SM), with its register cap."""
    tm, tn = persistent_split(m, n, BLOCK_M, BLOCK_N)
    constants = (("BLOCK_M", BLOCK_M), ("BLOCK_N", BLOCK_N), ("BLOCK_K", BLOCK_K), ("GROUP_M", GROUP_M),
                 ("GRID_M", BLOCK_M * tm), ("GRID_N", BLOCK_N * tn), (TMA_CONSTANT, 1), ("STAGES", STAGES),
                 (MAXNREG_CONSTANT, MAX_REGISTERS))
    return LaunchConfig(constants, num_warps=NUM_WARPS, num_stages=1)
