"""The Triton GEMM template: one `mm`/`bmm` with its pointwise epilogue in one kernel.

The kernel follows the Triton matmul tutorial: a 2-D grid of output tiles walked in
grouped order (GROUP_M row-tiles reuse the same B columns while they sit in L2), an
fp32 accumulator fed by `tl.dot` over K, then the epilogue evaluated on the
accumulator tile by the same `KernelWriter` (and pointwise expression table) the
pointwise kernels use, rounded to the output dtype once, on store.

Operands are read through their view chains (a Linear's `permute(weight)` is a
stride swap, never a copy) when the view is affine in the matrix indices; otherwise
there is no template for the kernel and codegen keeps cuBLAS (`write_template` -> None).
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, replace

import sympy
from pipec_ir import TMA_CONSTANT, Graph, Kernel, LaunchConfig, TritonKernel
from pipec_ir.indexing import coarse_index, refine_shapes, view_source_index
from pipec_ir.ops import MATMUL_OPS, VIEW, kind_of
from pipec_ir.symbolic import HOST_ONLY, FloorDiv, ModularIndexing, contiguous_strides, index_symbol, numel, renamed_index

from .bounds import K_LOOP, check_operands
from .dtypes import tl_storage
from .matmul_gluon import gluon_lines, pingpong_config, pingpong_source, store_tile_lines
from .matmul_tma import (PERSISTENT_PROGRAMS, SUBTILE_SPLIT, TMA_CONFIGS, TmaOperand, persistent_loop,
                         persistent_split, tma_operand)
from .simplify import collapse
from .kernel_source import CodegenError, Scope, writes_clause
from .triton_helpers import helpers_used
from .writer import KernelWriter

TEMPLATE_DTYPES = ("float16", "bfloat16", "float32")

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages); the first is used untuned.
# 16-bit operands: tensor-core tiles that fit Hopper's 227 KB of shared memory per block.
_HALF_CONFIGS = (
    (128, 128, 64, 8, 8, 3),
    (128, 256, 64, 8, 8, 3),
    (256, 128, 64, 8, 8, 3),
    (128, 128, 64, 8, 4, 4),
    (64, 128, 64, 8, 4, 4),
    (64, 64, 64, 8, 4, 3),
)
# fp32 with input_precision="ieee" (eager's full-precision fp32 matmul): FMA tiles.
_FP32_CONFIGS = (
    (64, 64, 32, 8, 4, 3),
    (128, 128, 32, 8, 8, 3),
    (128, 64, 32, 8, 4, 3),
    (64, 128, 32, 8, 4, 3),
    (32, 32, 32, 8, 4, 3),
)
_INT32_MAX = 2**31 - 1
_IDS = itertools.count()


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _hint(expr, upper: dict) -> int:
    """A size's value for choosing tile shapes: itself when static, else its symbols' upper
    bound when they have one, else "large"."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    try:
        return int(expr.xreplace({s: upper[s.name] for s in expr.free_symbols}))
    except (KeyError, TypeError):
        return 1 << 20


# A persistent TMA config is offered when the product has at least two tiles per program of its
# one-per-SM grid: with fewer, a one-tile-per-program grid is a single wave and has no tail to save.
_TMA_MIN_TILES = 2 * PERSISTENT_PROGRAMS


def template_configs(m: int, n: int, k: int, dtype: str, tma: bool = False) -> tuple[LaunchConfig, ...]:
    """Candidate tiles, each block no larger than its (power-of-two rounded) dim: a 16 x 32 @ 32 x 24
    product gets one 16 x 32 x 32 tile, which also keeps Triton's CPU interpreter to a single program.
    The grid is cdiv(M, GRID_M) x cdiv(N, GRID_N): one tile per program (GRID = BLOCK) for the
    pointer kernel; with `tma` (operands a descriptor can read), large products also get the
    persistent TMA kernel (TMA=1, matmul_tma.py), GRID_M x GRID_N tiles per program."""
    table = _FP32_CONFIGS if dtype == "float32" else _HALF_CONFIGS
    out = []
    for bm, bn, bk, group, warps, stages in table:
        bm, bn, bk = (max(16, min(b, _pow2_at_least(d))) for b, d in ((bm, m), (bn, n), (bk, k)))
        if bm * bn <= 32 * 32:
            warps = min(warps, 2)
        elif bm * bn <= 64 * 64:
            warps = min(warps, 4)
        constants = (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("GROUP_M", group),
                     ("GRID_M", bm), ("GRID_N", bn)) + (((TMA_CONSTANT, 0), ("SUBTILE", 0)) if tma else ())
        config = LaunchConfig(constants, num_warps=warps, num_stages=stages)
        if config not in out:
            out.append(config)
    if tma and dtype != "float32":
        for bm, bn, bk, group, warps, stages, subtile in TMA_CONFIGS:
            if -(-m // bm) * -(-n // bn) < _TMA_MIN_TILES:
                continue
            tm, tn = persistent_split(m, n, bm, bn)
            constants = (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("GROUP_M", group),
                         ("GRID_M", bm * tm), ("GRID_N", bn * tn), (TMA_CONSTANT, 1), ("SUBTILE", subtile))
            out.append(LaunchConfig(constants, num_warps=warps, num_stages=stages))
    return tuple(out)


# ---------------------------------------------------------------- operand layouts


@dataclass(frozen=True)
class OperandLayout:
    """An operand read as `root[offset + sum(index_d * strides_d)]` (root: a tensor in memory)."""
    root: str
    offset: sympy.Expr
    strides: tuple[sympy.Expr, ...]


def operand_layout(graph: Graph, value: str, index: tuple) -> OperandLayout | None:
    """Where element `index` of `value` lives in the memory of its view chain's root, when that
    is affine in the index symbols (permute, expand, slice, and reshapes that merge or split
    contiguous dims); None otherwise."""
    nodes, types = graph.node_map(), graph.types()
    chain = []
    while value in nodes and kind_of(nodes[value].op) == VIEW:
        node = nodes[value]
        # without names: a model's layers read their weights and activations through the same
        # chains, and the layout depends only on the views (cached: ~6 ms of sympy each)
        chain.append((replace(node, name="view", inputs=("source",)), types[node.inputs[0]]))
        value = node.inputs[0]
    found = _affine_layout(tuple(chain), tuple(types[value].shape), _canonical(tuple(index)))
    return None if found is None else OperandLayout(value, *found)


def _canonical(index: tuple) -> tuple:
    """`index` with each plain index variable renamed after its position (its bound, if its name
    carries one, kept): the layout's offset and strides never hold them, so the templates of a
    model's matmuls, each with index variables of its own, share their layouts."""
    out = []
    for k, s in enumerate(index):
        if isinstance(s, sympy.Symbol) and s == index_symbol(s.name):
            s = renamed_index(s, f"operand{k}")
        out.append(s)
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _affine_layout(chain: tuple, root_shape: tuple, wanted: tuple) -> tuple | None:
    """(offset, strides) of `operand_layout`, for a view chain ((view, its input's type),
    outermost first) over a row-major root of `root_shape`."""
    syms = [s for s in wanted if isinstance(s, sympy.Symbol)]
    index = wanted
    for node, source in chain:
        index = view_source_index(node, index, source)
    strides = contiguous_strides(root_shape)
    offset = collapse(sympy.expand(sum((i * s for i, s in zip(index, strides)), sympy.Integer(0))))
    for term in sympy.preorder_traversal(offset):
        if isinstance(term, (FloorDiv, ModularIndexing, *HOST_ONLY)) and term.free_symbols & set(syms):
            return None
    rest, coeffs = offset, []
    for s in wanted:
        if not isinstance(s, sympy.Symbol):
            coeffs.append(sympy.Integer(0))
            continue
        c = offset.coeff(s)
        if c.free_symbols & set(syms):
            return None
        coeffs.append(c)
        rest = rest - c * s
    rest = sympy.expand(rest)
    if rest.free_symbols & set(syms):
        return None
    return rest, tuple(coeffs)


# ---------------------------------------------------------------- the epilogue


class EpilogueWriter(KernelWriter):
    """A `KernelWriter` evaluating pointwise nodes on a [BLOCK_M, BLOCK_N] tile: the template
    defines `x0, x1, ...` (tile coordinates), `xindex` (flat output index) and `xmask`."""

    block = "[BLOCK_M, BLOCK_N]"  # the tile the epilogue runs on (a half of it under SUBTILE)
    axes: dict[str, str] = {}  # x0, x1, ... -> the tile axis it is computed from: "m", "n" or "b"

    def _block_shape(self, inner: bool) -> str:
        return self.block

    def _load(self, name, index):
        """A load over only the tile axes its index uses: a bias indexed by the column is one
        [1, BLOCK_N] row per tile (masked by `nmask`), not BLOCK_M copies of it."""
        offset = sum((i * s for i, s in zip(index, contiguous_strides(self.types[name].shape))), sympy.Integer(0))
        used = {self.axes.get(self.names.get(sym)) for sym in sympy.sympify(offset).free_symbols}
        mask = {frozenset("mn"): "xmask", frozenset("n"): "nmask", frozenset("m"): "mmask"}.get(
            frozenset(used & {"m", "n"}))
        if mask == "xmask" or (mask is None and not used):
            return super()._load(name, index)
        printed = self.print_index(offset)
        if re.search(r"\bxindex\b", printed):
            # simplified into the tile's flat index (an operand of the output's own layout but for a
            # size-1 dim): that is right only where the whole tile mask holds, and off it past the
            # operand's end (a [M, 1] output's columns rn >= 1 read rm + rn)
            return super()._load(name, index)
        where = self.check_bounds(self.outer, name, printed, mask, "load", offset)
        if mask is None:  # the batch (pid_b) only: one element per tile, and every pid_b is a batch
            text = f"tl.broadcast_to(tl.load({self.in_ptr[name]} + ({where})), {self.block})"
        else:
            text = f"tl.load({self.in_ptr[name]} + ({where}), mask={mask}, other=0)"
        if self.types[name].dtype in ("float16", "bfloat16"):
            text += ".to(tl.float32)"
        return self.emit(self._scope(False), text), False


def epilogue_inputs(graph: Graph, nodes: list[str], product: str) -> tuple[str, ...]:
    """The values the epilogue `nodes` read from memory: roots of their operands' view chains,
    except values computed among them and the product (the accumulator). A chain is followed only
    through the views among `nodes`: a view fusion made a kernel of its own (one taken straight off
    a library result laid out other than row-major, fusion's `materialized`) is read as the tensor
    it is. Reading through it to the library result had the runtime copy that result row-major
    first: ConvNeXt's downsampling conv, whose row-major copy then sent the next depthwise conv
    to ATen's generic kernel instead of cuDNN's channels-last one."""
    by_name = graph.node_map()
    inside = set(nodes) | {product}
    views = {n for n in nodes if kind_of(by_name[n].op) == VIEW}
    out: list[str] = []
    for name in nodes:
        node = by_name[name]
        if kind_of(node.op) == VIEW:
            continue
        for value in node.inputs:
            while value in views:
                value = by_name[value].inputs[0]
            if value not in inside and value not in out:
                out.append(value)
    return tuple(out)


# ---------------------------------------------------------------- epilogues over reshapes of the product
# `nn.Linear` on [B, T, K] is `reshape -> mm -> reshape`: its epilogue (GELU, a residual add) runs
# over [B, T, N] while the tile computes [B*T, N]. Fusion admits such an epilogue when every shape
# in it is a row-major reshape of the product that only splits or merges adjacent dims; the
# epilogue is then written over the shapes' common refinement, whose point at the tile's flat
# index is the same element in every one of them (pipec_ir.indexing: refine_shapes, coarse_index,
# which fusion's legality uses too).


def epilogue_refinement(graph: Graph, nodes, product: str) -> tuple | None:
    """The common refinement of the product's shape and its epilogue's shapes of the same numel,
    or None when every one of them is the product's shape (the plain epilogue). Shapes that
    differ from the product's only by size-1 dims ([1, T, N] of a [T, N] product: `nn.Linear`
    on a batch of one) count as reshapes too: their index still needs the 0s put in."""
    by_name, types = graph.node_map(), graph.types()
    shape = tuple(by_name[product].type.shape)
    refined = tuple(s for s in shape if s != 1)
    reshaped = False
    for name in nodes:
        other = tuple(types[name].shape)
        if kind_of(by_name[name].op) == VIEW or tuple(other) == shape:
            continue
        r = refine_shapes(refined, other)
        refined = r if r is not None else refined
        reshaped = reshaped or r is not None
    # a product of one element ([1, 1]) refines to (1,), not (): callers take an empty tuple for
    # "no refinement" (a [1] epilogue output of a [1, 1] GEMM failed codegen: fuzz seed 503)
    return (refined or (sympy.Integer(1),)) if reshaped else None


def value_at(w: KernelWriter, refined, name: str) -> str:
    """`name` evaluated at the point of the writer's (refined) domain index."""
    index = coarse_index(w.domain_index, refined, w.types[name].shape)
    if index is None:
        raise CodegenError(f"{w.kernel.name}: {name}'s shape {list(w.types[name].shape)} is no reshape "
                           f"of the epilogue's domain {list(refined)}")
    return w.value(name, index)[0]


@dataclass(frozen=True)
class TemplateKernel:
    kernel: TritonKernel
    inputs: tuple[str, ...]  # the launch step's tensor inputs (a, b, then the epilogue's)
    pingpong: TritonKernel | None = None  # the Gluon ping-pong kernel (matmul_gluon.py), same arguments


def write_template(graph: Graph, kernel: Kernel, pingpong: bool = True,
                   exhaustive: bool = False, bounds_check: bool = False) -> TemplateKernel | None:
    """The Triton GEMM template for a matmul kernel (with or without an epilogue), or None when the
    operands' dtype or layout has no template (the kernel stays a library call). `pingpong`: may
    a Gluon ping-pong kernel be written beside it (`pingpong_wanted`). `exhaustive` (the
    max-autotune modes): every candidate the runtime could time, none left out to save compile
    time (the ping-pong kernel wherever it can be written, every persistent config beside it)."""
    nodes, types = graph.node_map(), graph.types()
    product = next(n for n in kernel.nodes if nodes[n].op in MATMUL_OPS)
    node = nodes[product]
    a, b = node.inputs
    dtype = types[a].dtype
    if dtype not in TEMPLATE_DTYPES or types[b].dtype != dtype:
        return None
    batched = node.op == "bmm"
    tag = next(_IDS)
    bi, i, j, k = (index_symbol(f"{n}_mm{tag}") for n in ("b", "i", "j", "k"))
    a_layout = operand_layout(graph, a, (bi, i, k) if batched else (i, k))
    b_layout = operand_layout(graph, b, (bi, k, j) if batched else (k, j))
    if a_layout is None or b_layout is None:
        return None

    out_shape = tuple(node.type.shape)
    M, N = out_shape[-2], out_shape[-1]
    K = types[a].shape[-1]
    upper = {s.name: s.upper for s in graph.symbols if s.upper is not None}
    big = any(_hint(numel(types[v].shape), upper) > _INT32_MAX
              for v in (a_layout.root, b_layout.root, *kernel.outputs))
    tma = None if batched or big else _tma_operands(a_layout, b_layout, dtype)
    configs = template_configs(_hint(M, upper), _hint(N, upper), _hint(K, upper), dtype, tma=tma is not None)

    epilogue = [n for n in kernel.nodes if n != product]
    ep_inputs = epilogue_inputs(graph, epilogue, product)
    refined = epilogue_refinement(graph, epilogue, product)
    ep_kernel = Kernel(kernel.name, "pointwise", tuple(epilogue), kernel.outputs, ep_inputs,
                       tuple(refined or out_shape))
    w = EpilogueWriter(graph, ep_kernel, bounds_check=bounds_check)

    sizes: list[tuple[str, sympy.Expr]] = [("M", M), ("N", N), ("K", K)]

    def size(name: str, expr) -> str:
        """A stride or offset: a literal when static, else an integer parameter."""
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return str(int(expr))
        sizes.append((name, expr))
        return name

    a_strides = dict(zip(("b", "m", "k") if batched else ("m", "k"), a_layout.strides))
    b_strides = dict(zip(("b", "k", "n") if batched else ("k", "n"), b_layout.strides))
    s_am, s_ak = size("stride_am", a_strides["m"]), size("stride_ak", a_strides["k"])
    s_bk, s_bn = size("stride_bk", b_strides["k"]), size("stride_bn", b_strides["n"])
    a_base, b_base = ["a_ptr"], ["b_ptr"]
    if batched:
        a_base.append(f"pid_b * {size('stride_ab', a_strides['b'])}")
        b_base.append(f"pid_b * {size('stride_bb', b_strides['b'])}")
    if a_layout.offset != 0:
        a_base.append(size("offset_a", a_layout.offset))
    if b_layout.offset != 0:
        b_base.append(size("offset_b", b_layout.offset))

    # every candidate BLOCK_K divides a static K: no mask in the K loop
    even_k = K.is_Integer and all(int(K) % dict(c.constants)["BLOCK_K"] == 0 for c in configs)

    body = _main_loop(batched, " + ".join(a_base), " + ".join(b_base), s_am, s_ak, s_bk, s_bn,
                      even_k, big, dtype)
    if bounds_check:
        body = check_operands(w, body, (a_layout.root, " + ".join(a_base[1:]), s_am, s_ak),
                              (b_layout.root, " + ".join(b_base[1:]), s_bk, s_bn))
    body += _epilogue(w, product, kernel.outputs, out_shape, batched, refined)
    if tma is not None:  # `if TMA:` is resolved when Triton compiles a config: one branch is compiled
        stores = tma_stores(w, kernel.outputs, M, N)
        body = (["    if TMA:"] + _indent(_persistent_tma(w, tma, product, kernel.outputs, out_shape, refined, stores))
                + ["    else:"] + _indent(body))

    pingpong_epilogue = None
    if pingpong and tma is not None and pingpong_wanted(tma, configs, body, exhaustive):
        pingpong_epilogue = _pingpong_epilogue(w, product, kernel.outputs, out_shape, refined, M, N)
    if pingpong_epilogue is not None and not exhaustive:
        # beside the ping-pong kernel (faster than the template's best on the bf16 MLP:
        # docs/performance.md, "The Gluon ping-pong kernel") the template keeps one persistent
        # config, TMA_CONFIGS' first: each is seconds of compile
        persistent = [c for c in configs if dict(c.constants).get(TMA_CONSTANT)]
        configs = tuple(c for c in configs if c not in persistent[1:])

    params = ["a_ptr", "b_ptr", *w.in_ptr.values(), *w.out_ptr.values(), *(n for n, _ in sizes)]
    w.append_scalar_params(params, sizes)
    values = list(params)  # the parameters before the constexprs (the ping-pong kernel's too)
    params += ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr", "BLOCK_K: tl.constexpr",
               "GROUP_M: tl.constexpr", "GRID_M: tl.constexpr", "GRID_N: tl.constexpr"]
    if tma is not None:
        params += [f"{TMA_CONSTANT}: tl.constexpr", "SUBTILE: tl.constexpr"]
    header = ["import triton", "import triton.language as tl"]
    if w.uses_libdevice:
        header.append("from triton.language.extra import libdevice")
    ops = [nodes[n].op for n in kernel.nodes if kind_of(nodes[n].op) != VIEW]
    shape_a = "[B, M, K] @ [B, K, N]" if batched else "[M, K] @ [K, N]"
    doc = f"{' -> '.join(ops)}: {shape_a} into an fp32 tile, epilogue on the tile{writes_clause(kernel.outputs)}"
    source = "\n".join(header) + "\n" + helpers_used(body) + f"\n\n{w.jit}\n"
    source += f"def {kernel.name}({', '.join(params)}):\n"
    source += f'    """{doc}"""\n' + "\n".join(body) + "\n"

    grid = ((M, "GRID_M"), (N, "GRID_N")) + (((out_shape[0], ""),) if batched else ())
    triton_kernel = TritonKernel(
        name=kernel.name, source=source,
        args=("a_ptr", "b_ptr", *w.in_ptr.values(), *w.out_ptr.values()),
        sizes=tuple(sizes), grid=grid, configs=configs,
    )
    pingpong = None
    if pingpong_epilogue is not None:
        lines, helpers, store = pingpong_epilogue
        name = f"{kernel.name}_pingpong"
        source = pingpong_source(name, f"{doc} (Gluon ping-pong)", values, *tma, lines,
                                 helpers, store)
        pingpong = TritonKernel(name=name, source=source, args=triton_kernel.args, sizes=triton_kernel.sizes,
                                grid=grid, configs=(pingpong_config(_hint(M, upper), _hint(N, upper)),))
    return TemplateKernel(triton_kernel, (a_layout.root, b_layout.root, *ep_inputs), pingpong)


# A transcendental function in the epilogue: what the ping-pong kernel's overlap is worth compiling
# for (a bias or a residual add costs little beside the MMAs; each Gluon kernel is seconds of compile).
_COSTLY = re.compile(r"_pipec_gelu_half|\btl\.(exp2?|log2?|erf|sqrt|rsqrt|sin|cos|sigmoid)\(")


def pingpong_wanted(tma, configs, body: list[str], exhaustive: bool = False) -> bool:
    """Offer the Gluon ping-pong kernel beside the template: when the persistent TMA kernel is
    offered (a large product, operands a descriptor reads), A is read untransposed (wgmma's A
    from shared memory K-major), the operands are 16-bit and the epilogue is costly (any
    epilogue when `exhaustive`)."""
    persistent = any(dict(c.constants).get(TMA_CONSTANT) for c in configs)
    costly = exhaustive or _COSTLY.search("\n".join(body)) is not None
    return persistent and not tma[0].transposed and costly


def _pingpong_epilogue(w: EpilogueWriter, product, outputs, out_shape, refined, M, N):
    """(Gluon epilogue lines, Gluon helpers, the output pointer stored through TMA) of the
    ping-pong kernel, or None when the epilogue needs what Gluon cannot spell (matmul_gluon.gluon_lines)."""
    # one output tile leaves through shared memory (a 16-bit one: the ring leaves room for two
    # 32 KB tiles); the others through pointer stores
    stores = tma_stores(w, outputs, M, N)
    first = next((o for o in stores if w.types[o].dtype in ("float16", "bfloat16")), None)
    lines = _epilogue(w, product, outputs, out_shape, False, refined, "acc", "[BLOCK_M, BLOCK_N]",
                      {first: "c_desc"} if first else None, "om, on", store_tile=store_tile_lines)
    helpers = helpers_used(lines)
    lines, helper_lines = gluon_lines(lines), gluon_lines(helpers.split("\n"), in_tile=False)
    if lines is None or helper_lines is None or w.uses_libdevice:
        return None
    return lines, "\n".join(helper_lines), (w.out_ptr[first] if first else None)


def _times(var: str, stride: str) -> str:
    return var if stride == "1" else f"{var} * {stride}"


def _main_loop(batched, a_base, b_base, s_am, s_ak, s_bk, s_bn, even_k, big, dtype) -> list[str]:
    lines = []
    if batched:
        lines.append("    pid_b = tl.program_id(2)")
    lines += [
        "    # grouped tile order: GROUP_M row-tiles in a row share B's column tiles in L2",
        "    num_pid_m = tl.cdiv(M, BLOCK_M)",
        "    num_pid_n = tl.cdiv(N, BLOCK_N)",
        "    pid = tl.program_id(0) + tl.program_id(1) * num_pid_m",
        "    num_pid_in_group = GROUP_M * num_pid_n",
        "    group_id = pid // num_pid_in_group",
        "    first_pid_m = group_id * GROUP_M",
        "    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)",
        "    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m",
        "    pid_n = (pid % num_pid_in_group) // group_size_m",
        "    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
    ]
    if big:  # offsets past 2**31 elements
        lines += ["    rm = rm.to(tl.int64)", "    rn = rn.to(tl.int64)"]
    lines += [
        "    rk = tl.arange(0, BLOCK_K)",
        "    # edge tiles read wrapped-around rows and columns; the store mask drops them",
        "    ram = rm % M",
        "    rbn = rn % N",
        f"    a_ptrs = {a_base} + ({_times('ram[:, None]', s_am)} + {_times('rk[None, :]', s_ak)})",
        f"    b_ptrs = {b_base} + ({_times('rk[:, None]', s_bk)} + {_times('rbn[None, :]', s_bn)})",
        "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        K_LOOP,
    ]
    if even_k:
        lines += ["        a = tl.load(a_ptrs)", "        b = tl.load(b_ptrs)"]
    else:
        lines += ["        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BLOCK_K, other=0.0)",
                  "        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BLOCK_K, other=0.0)"]
    # eager fp32 matmuls are full fp32 (torch's allow_tf32 is off by default): no TF32 here either
    precision = ', input_precision="ieee"' if dtype == "float32" else ""
    lines += [
        f"        acc = tl.dot(a, b, acc{precision})",
        f"        a_ptrs += {_times('BLOCK_K', s_ak)}",
        f"        b_ptrs += {_times('BLOCK_K', s_bk)}",
    ]
    return lines


def _epilogue(w: EpilogueWriter, product: str, outputs, out_shape, batched, refined,
              acc: str = "acc", block: str = "[BLOCK_M, BLOCK_N]", stores: dict | None = None,
              at: str = "", store_tile=None) -> list[str]:
    """Define the tile's coordinates as the writer's x0, x1, ... and xindex, then evaluate
    and store every output on the accumulator tile `acc` (rows `rm`, columns `rn`, shape `block`).
    With `refined` (an epilogue over reshapes of the product) x0, x1, ... are the refined dims,
    split off the tile's rows and columns. `stores`: outputs written through a TMA descriptor
    (output -> descriptor variable), the tile's corner at `at` ("om, on"); `store_tile(value,
    dtype)` gives the lines of such a store instead of a descriptor's `.store` (the Gluon kernel)."""
    coords = (["pid_b"] if batched else []) + ["rm[:, None]", "rn[None, :]"]
    lines = ["    # epilogue on the fp32 accumulator tile"]
    if refined is None:
        lines += [f"    x{d} = {c}" for d, c in enumerate(coords)]
    else:
        lines += _split_coordinates(w, coords, out_shape, refined)
    w.axes = {}
    for line in lines[1:]:
        var, expr = line.strip().split(" = ", 1)
        w.axes[var] = "m" if "rm" in expr else "n" if "rn" in expr else "b"
    strides = contiguous_strides(out_shape)
    flat = " + ".join(c if s == 1 else f"{c} * ({w.print_size(s)})" for c, s in zip(coords, strides))
    lines += [f"    xindex = {flat}", "    mmask = rm[:, None] < M", "    nmask = rn[None, :] < N",
              "    xmask = mmask & nmask"]
    w.outer = Scope(lines, inner=False, indent="    ")
    w.inner = None
    w.block = block
    dims = refined or out_shape
    own = coarse_index(w.domain_index, dims, out_shape) if refined else w.domain_index
    w.outer.cache[(product, tuple(sympy.sympify(i) for i in own))] = acc
    for out in outputs:
        var = acc if out == product else value_at(w, dims, out)
        dtype = w.types[out].dtype
        if stores and out in stores and store_tile is not None:
            lines += ["    " + line for line in store_tile(var, tl_storage(dtype))]
        elif stores and out in stores:  # asynchronous, and the TMA unit drops what is out of bounds
            lines.append(f"    {stores[out]}.store([{at}], tl.broadcast_to({var}, {block}).to({tl_storage(dtype)}))")
        else:
            where = w.check_bounds(w.outer, out, "xindex", "xmask", "store")
            lines.append(f"    tl.store({w.out_ptr[out]} + ({where}), {var}.to({tl_storage(dtype)}), xmask)")
    return lines


def _indent(lines: list[str], by: str = "    ") -> list[str]:
    return [by + line if line else line for line in lines]


def _tma_operands(a_layout: OperandLayout, b_layout: OperandLayout, dtype: str):
    """(A's, B's) TMA descriptors, or None when either operand has none (matmul_tma.tma_operand)."""
    a = tma_operand(dict(zip("mk", a_layout.strides)), a_layout.offset, dtype, "m", "k")
    b = tma_operand(dict(zip("kn", b_layout.strides)), b_layout.offset, dtype, "k", "n")
    return (a, b) if a is not None and b is not None else None


def _persistent_tma(w: EpilogueWriter, tma: tuple[TmaOperand, TmaOperand], product, outputs, out_shape,
                    refined, stores: dict[str, str]) -> list[str]:
    """The persistent TMA kernel body: the tile walk and K loop (matmul_tma.persistent_loop), then
    the epilogue per tile, on the whole accumulator or (SUBTILE) on its two column halves; the
    outputs in `stores` go out through descriptors (`tma_stores`)."""
    half = "[BLOCK_M, BLOCK_N // 2]"

    def epilogue(acc: str, column: str, block: str) -> list[str]:
        width = block.split(", ")[1].rstrip("]")
        return [f"        rn = {column} + tl.arange(0, {width})"] + _indent(
            _epilogue(w, product, outputs, out_shape, False, refined, acc, block, stores, f"om, {column}"))

    lines = persistent_loop(*tma)
    lines[2:2] = [f"    {desc} = tl.make_tensor_descriptor({w.out_ptr[out]}, shape=[M, N], strides=[N, 1], "
                  "block_shape=[BLOCK_M, BLOCK_N // (SUBTILE + 1)])" for out, desc in stores.items()]
    lines += ["        if SUBTILE:"] + _indent(SUBTILE_SPLIT)
    lines += _indent(epilogue("acc_left", "on", half))
    lines += _indent(epilogue("acc_right", "on + BLOCK_N // 2", half))
    lines += ["        else:"] + _indent(epilogue("acc", "on", "[BLOCK_M, BLOCK_N]"))
    return lines


def tma_stores(w: EpilogueWriter, outputs, M, N) -> dict[str, str]:
    """Outputs the persistent kernel writes through a TMA descriptor over [M, N]: every one whose
    16-bit or fp32 row of a static N is a multiple of 16 bytes (each output is a row-major [M, N],
    or a reshape of it, in a contiguous buffer). The others keep masked pointer stores."""
    itemsize = {"float16": 2, "bfloat16": 2, "float32": 4}
    n = sympy.sympify(N)
    out = {}
    for name in outputs:
        size = itemsize.get(w.types[name].dtype)
        if size and n.is_Integer and int(n) * size % 16 == 0:
            out[name] = f"{w.out_ptr[name]}_desc"
    return out


def _split_coordinates(w: EpilogueWriter, coords, out_shape, refined) -> list[str]:
    """x0, x1, ... over `refined` from the tile's coordinates: a product dim that merges refined
    dims (the rows of [B*T, N] as [B, T, N]) is split row-major: x0 = rm // T, x1 = rm % T."""
    lines, k = [], 0
    for coord, size in zip(coords, out_shape):
        if size == 1:
            continue
        group, prod = [], sympy.Integer(1)
        while sympy.expand(prod - size) != 0:
            group.append(refined[k])
            prod, k = prod * refined[k], k + 1
        for g, stride in enumerate(contiguous_strides(group)):
            e = coord if stride == 1 else f"{coord} // ({w.print_size(stride)})"
            if g > 0:
                e = f"({e}) % ({w.print_size(group[g])})"
            lines.append(f"    x{k - len(group) + g} = {e}")
    return lines


__all__ = ["write_template", "epilogue_refinement", "value_at", "template_configs", "operand_layout", "epilogue_inputs"]
