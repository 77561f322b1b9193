"""Pointwise kernels in 2-d tiles (tiling.py): which kernels are tiled, and that a tiled kernel
computes what the flat one does, with per-row and per-column operands and partial tiles on both
axes. Kernels run in Triton's interpreter on the CPU (on the GPU where there is one)."""

import pytest
import torch
from pipec_codegen_triton import generate_program, tiling
from pipec_ir import CompileOptions, KernelPlan

from conftest import DT, kernel, run_program

N, C, H, W, G = 2, 40, 17, 29, 4  # NCHW; no size a power of two: every tile is partial somewhere


TILES = CompileOptions()  # tiles are on by default


def _program(b, nodes, inputs, outputs, domain, options=TILES):
    plan = KernelPlan(b.graph(outputs), "test", (kernel("pipec_k", "pointwise", nodes, inputs, outputs, domain),))
    return generate_program(plan, options)


def _group_norm_apply_nhwc(b, dtype="float32", options=TILES):
    """silu(((x - mean[n, g]) * rstd[n, g] * gamma[c] + beta[c]) * scale[n, h, w]) of an NCHW x,
    stored NHWC: the kernel conv_layouts.py's copy of a group norm's output becomes (x read
    transposed; gamma and beta once per column of the tile, the scale once per row)."""
    x = b.input("x", (N, C, H, W), dtype)
    mean = b.input("mean", (N, G))
    rstd = b.input("rstd", (N, G))
    gamma = b.input("gamma", (C,))
    beta = b.input("beta", (C,))
    scale = b.input("scale", (N, 1, H, W))
    b.node("sp", "permute", [scale], (N, H, W, 1), dims=(0, 2, 3, 1))
    b.node("se", "expand", ["sp"], (N, H, W, C))
    b.node("xp", "permute", [x], (N, H, W, C), dtype, dims=(0, 2, 3, 1))
    b.node("xf", "cast", ["xp"], (N, H, W, C))
    b.node("m4", "reshape", [mean], (N, 1, 1, G, 1))
    b.node("me", "expand", ["m4"], (N, H, W, G, C // G))
    b.node("mc", "reshape", ["me"], (N, H, W, C))
    b.node("r4", "reshape", [rstd], (N, 1, 1, G, 1))
    b.node("re", "expand", ["r4"], (N, H, W, G, C // G))
    b.node("rc", "reshape", ["re"], (N, H, W, C))
    b.node("g4", "reshape", [gamma], (1, 1, 1, C))
    b.node("ge", "expand", ["g4"], (N, H, W, C))
    b.node("b4", "reshape", [beta], (1, 1, 1, C))
    b.node("be", "expand", ["b4"], (N, H, W, C))
    b.node("d", "sub", ["xf", "mc"], (N, H, W, C))
    b.node("s", "mul", ["d", "rc"], (N, H, W, C))
    b.node("sg", "mul", ["s", "ge"], (N, H, W, C))
    b.node("y", "add", ["sg", "be"], (N, H, W, C))
    b.node("ys", "mul", ["y", "se"], (N, H, W, C))
    b.node("out", "silu", ["ys"], (N, H, W, C))
    b.node("o", "cast", ["out"], (N, H, W, C), dtype)
    nodes = ["xp", "xf", "m4", "me", "mc", "r4", "re", "rc", "g4", "ge", "b4", "be", "d", "s", "sg", "y", "sp", "se", "ys", "out", "o"]
    return _program(b, nodes, [x, mean, rstd, gamma, beta, scale], ["o"], (N, H, W, C), options)


def _expected(x, mean, rstd, gamma, beta, scale):
    per_group = C // G
    m = mean.repeat_interleave(per_group, dim=1)[:, :, None, None]
    r = rstd.repeat_interleave(per_group, dim=1)[:, :, None, None]
    y = (x.float() - m) * r * gamma[:, None, None] + beta[:, None, None]
    return torch.nn.functional.silu(y * scale).to(x.dtype).permute(0, 2, 3, 1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("tile", [None, {"YBLOCK": 64, "XBLOCK": 16}],
                         ids=["first_config", "small_tiles"])
def test_a_transposing_kernel_is_tiled_and_computes_the_flat_values(builder, dtype, tile):
    program = _group_norm_apply_nhwc(builder, dtype)
    (k,) = program.kernels
    assert "YBLOCK" in k.source and [name for _, name in k.grid] == ["YBLOCK", "XBLOCK"]
    assert dict(k.sizes) == {"ynumel": N * H * W, "xnumel": C}  # rows: n, h, w; columns: c
    assert "mask=ymask" in k.source and "mask=xmask" in k.source  # per-row and per-column reads
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, C, H, W, generator=g).to(DT[dtype])
    mean, rstd = torch.randn(N, G, generator=g), torch.rand(N, G, generator=g) + 0.5
    gamma, beta = torch.randn(C, generator=g), torch.randn(C, generator=g)
    scale = torch.randn(N, 1, H, W, generator=g)
    (out,) = run_program(program, [x, mean, rstd, gamma, beta, scale], constants=tile)
    tol = {} if dtype == "float32" else dict(rtol=1.6e-2, atol=2e-2)  # the interpreter truncates to bf16
    torch.testing.assert_close(out, _expected(x, mean, rstd, gamma, beta, scale).contiguous(), **tol)


def test_kernels_that_read_in_order_or_are_small_stay_flat(builder):
    b = builder
    x = b.input("x", (N, H, W, C))
    b.node("y", "silu", [x], (N, H, W, C))
    program = _program(b, ["y"], [x], ["y"], (N, H, W, C))
    assert "YBLOCK" not in program.kernels[0].source  # contiguous along the innermost dim

    from conftest import Builder
    b = Builder()
    small = b.input("s", (2, 8, 4, 4))
    b.node("sp", "permute", [small], (2, 4, 4, 8), dims=(0, 2, 3, 1))
    b.node("o", "silu", ["sp"], (2, 4, 4, 8))
    program = _program(b, ["sp", "o"], [small], ["o"], (2, 4, 4, 8))
    assert 2 * 8 * 4 * 4 < tiling.MIN_TILED_NUMEL and "YBLOCK" not in program.kernels[0].source


@pytest.mark.parametrize("option", [True, False])
def test_the_option_switches_tiles(builder, option):
    """The codegen option `tiled_transposes` (on by default) switches tiles: off, the kernel is flat."""
    program = _group_norm_apply_nhwc(builder, options=CompileOptions().with_extra(tiled_transposes=option))
    assert ("YBLOCK" in program.kernels[0].source) == option


def _group_stats_nhwc(b, reduction="sum", extra_full_output=False):
    """A group norm's statistic over an NHWC-stored x, as the IR sees a conv's channels-last
    result: rows [C/G, H, W] of x viewed NCHW, stored [H, W, C/G] (the channels innermost)."""
    x = b.input("x", (N, H, W, C))
    b.node("xp", "permute", [x], (N, C, H, W), dims=(0, 3, 1, 2))
    b.node("xg", "reshape", ["xp"], (N, G, C // G, H, W))
    b.node("sq", "mul", ["xg", "xg"], (N, G, C // G, H, W))
    dtype = "int64" if reduction == "argmax" else "float32"
    b.node("s", reduction, ["sq"], (N, G, 1, 1, 1), dtype, dims=(2, 3, 4), keepdim=True)
    nodes, outputs = ["xp", "xg", "sq", "s"], ["s"]
    if extra_full_output:
        nodes, outputs = nodes + [], ["s", "sq"]
    plan = KernelPlan(b.graph(outputs), "test", (kernel("pipec_k", "reduction", nodes, [x], outputs,
                                                       (N, G, C // G, H, W), (2, 3, 4)),))
    return generate_program(plan, TILES)


@pytest.mark.parametrize("limit", [None, 64])  # one pass over the row, and a loop over it
def test_a_row_read_across_its_innermost_dim_is_walked_in_memory_order(builder, limit):
    """The channels of a group, innermost in memory, are walked innermost: r0 (the channel in
    the group) comes from rindex % (C / G); the sums are the sums of the rows as torch gives them."""
    options = TILES if limit is None else TILES.with_extra(persistent_reduction_limit=limit)
    program = _group_stats_nhwc(builder)
    if limit is not None:
        program = generate_program(KernelPlan(builder.graph(["s"]), "test", (kernel(
            "pipec_k", "reduction", ["xp", "xg", "sq", "s"], ["x"], ["s"], (N, G, C // G, H, W), (2, 3, 4)),)),
            options)
    src = program.kernels[0].source
    assert f"r0 = (rindex) % ({C // G})" in src, src
    assert ("for roffset in range" in src) == (limit is not None)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, H, W, C, generator=g)
    (out,) = run_program(program, [x])
    expected = (x.permute(0, 3, 1, 2).reshape(N, G, C // G, H, W) ** 2).sum((2, 3, 4), keepdim=True)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("case", ["argmax", "full_output", "off"])
def test_rows_whose_order_shows_keep_the_logical_walk(builder, case):
    """An argmax's index counts along the walk, and a full-size output would be stored across the
    rows: both keep the logical order; and with the option off nothing is reordered."""
    if case == "off":
        plan_src = _group_stats_nhwc(builder).kernels[0].source
        assert f"r0 = (rindex) % ({C // G})" in plan_src  # on by default...
        off = generate_program(KernelPlan(builder.graph(["s"]), "test", (kernel(
            "pipec_k", "reduction", ["xp", "xg", "sq", "s"], ["x"], ["s"], (N, G, C // G, H, W), (2, 3, 4)),)),
            CompileOptions().with_extra(tiled_transposes=False))
        assert f"r0 = (rindex) % ({C // G})" not in off.kernels[0].source  # ...and not with tiled_transposes=False
        return
    program = _group_stats_nhwc(builder, reduction="argmax" if case == "argmax" else "sum",
                                extra_full_output=case == "full_output")
    assert f"r0 = (rindex) % ({C // G})" not in program.kernels[0].source
