"""Reduction kernels: one-pass loops (online softmax, Welford), several reductions per loop,
column (non-innermost) reductions, persistent-row choice and launch configs.

Each kernel is checked against eager PyTorch; a small RBLOCK (`constants=`) makes the loop
run several iterations over a short row, so the running rescaling / merging is exercised.
"""

import math

import pytest
import torch
from pipec_codegen_triton import generate_program
from pipec_codegen_triton.configs import reduction_configs
from pipec_codegen_triton.writer import CodegenError, KernelWriter
from pipec_ir import CompileOptions, KernelPlan
import sympy

from conftest import DT, Builder, kernel, run_program

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf on purpose
LOOPED = CompileOptions().with_extra(persistent_reduction_limit=0)  # always loop over the row


def compile_one(graph, k, options=LOOPED):
    return generate_program(KernelPlan(graph, "test", (k,)), options)


def loops(program) -> int:
    return program.kernels[0].source.count("for roffset in range")


def softmax_kernel(b, rows, cols, dtype="float32", log=False):
    x = b.input("x", (rows, cols), dtype)
    b.node("amax", "max", [x], (rows, 1), dtype, dims=(1,), keepdim=True)
    b.node("amax_e", "expand", ["amax"], (rows, cols), dtype)
    b.node("sub", "sub", [x, "amax_e"], (rows, cols), dtype)
    b.node("exp", "exp", ["sub"], (rows, cols), dtype)
    b.node("sum", "sum", ["exp"], (rows, 1), dtype, dims=(1,), keepdim=True)
    if log:
        b.node("lse", "log", ["sum"], (rows, 1), dtype)
        b.node("lse_e", "expand", ["lse"], (rows, cols), dtype)
        b.node("out", "sub", ["sub", "lse_e"], (rows, cols), dtype)
    else:
        b.node("sum_e", "expand", ["sum"], (rows, cols), dtype)
        b.node("out", "div", ["exp", "sum_e"], (rows, cols), dtype)
    g = b.graph(["out", "sum"])
    names = [n.name for n in g.nodes]
    return g, kernel("pipec_fused_softmax_0", "reduction", names, ["x"], ["out", "sum"], (rows, cols), (1,))


def softmax_inputs(rows, cols, dtype):
    torch.manual_seed(0)
    x = (torch.randn(rows, cols) * 4).to(DT[dtype])
    if rows >= 4 and cols >= 3:
        x[1, cols // 2] = math.inf  # eager: the whole row is NaN
        x[2, :] = -math.inf  # eager: NaN (exp(-inf - -inf))
        x[3, 0] = math.nan
    return x


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype,rows,cols,rblock", [
    ("float32", 6, 37, 8),  # odd row, five loop iterations, a ragged last one
    ("float16", 5, 21, 4),
    ("float32", 3, 1, 4),  # size-1 rows
])
def test_online_softmax_reads_the_row_twice(builder, log, dtype, rows, cols, rblock):
    g, k = softmax_kernel(builder, rows, cols, dtype, log)
    prog = compile_one(g, k)
    assert loops(prog) == 2  # max+sum fused, then the normalised output
    x = softmax_inputs(rows, cols, dtype)
    out, total = run_program(prog, [x], constants={"RBLOCK": rblock})
    xf = x.float()
    ref = torch.log_softmax(xf, -1) if log else torch.softmax(xf, -1)
    torch.testing.assert_close(out, ref.to(x.dtype), equal_nan=True)
    ref_sum = torch.exp(xf - xf.amax(-1, keepdim=True)).sum(-1, keepdim=True)
    torch.testing.assert_close(total, ref_sum.to(x.dtype), equal_nan=True)


def variance_kernel(b, rows, cols, dtype="float32", square="mul"):
    """layer_norm's statistics as capture writes them: mean = sum / n, var = sum((x - mean)^2) / n."""
    x = b.input("x", (rows, cols), dtype)
    b.node("s", "sum", [x], (rows, 1), dtype, dims=(1,), keepdim=True)
    b.node("n", "full", [], (rows, 1), dtype, value=float(cols))
    b.node("mean", "div", ["s", "n"], (rows, 1), dtype)
    b.node("mean_e", "expand", ["mean"], (rows, cols), dtype)
    b.node("xc", "sub", [x, "mean_e"], (rows, cols), dtype)
    if square == "mul":
        b.node("sq", "mul", ["xc", "xc"], (rows, cols), dtype)
    else:
        b.node("two", "full", [], (rows, cols), dtype, value=2)
        b.node("sq", "pow", ["xc", "two"], (rows, cols), dtype)
    b.node("ss", "sum", ["sq"], (rows,), dtype, dims=(1,), keepdim=False)
    b.node("nv", "full", [], (rows,), dtype, value=float(cols))
    b.node("var", "div", ["ss", "nv"], (rows,), dtype)
    b.node("eps", "full", [], (rows, 1), dtype, value=1e-5)
    b.node("ve", "add", ["mean", "eps"], (rows, 1), dtype)
    b.node("rstd", "rsqrt", ["ve"], (rows, 1), dtype)
    b.node("var_k", "reshape", ["var"], (rows, 1), dtype)
    b.node("var_e", "expand", ["var_k"], (rows, cols), dtype)
    b.node("veps", "full", [], (rows, cols), dtype, value=1e-5)
    b.node("v2", "add", ["var_e", "veps"], (rows, cols), dtype)
    b.node("r2", "rsqrt", ["v2"], (rows, cols), dtype)
    b.node("y", "mul", ["xc", "r2"], (rows, cols), dtype)
    g = b.graph(["y", "var", "mean"])
    names = [n.name for n in g.nodes if n.name not in ("ve", "rstd", "eps")]
    return g, kernel("pipec_fused_layer_norm_0", "reduction", names, ["x"], ["y", "var", "mean"], (rows, cols), (1,))


@pytest.mark.parametrize("square", ["mul", "pow"])
@pytest.mark.parametrize("dtype,rows,cols,rblock", [("float32", 5, 45, 8), ("float16", 4, 19, 4),
                                                    ("float32", 3, 1, 2)])
def test_welford_mean_and_variance_in_one_pass(builder, square, dtype, rows, cols, rblock):
    g, k = variance_kernel(builder, rows, cols, dtype, square)
    prog = compile_one(g, k)
    assert loops(prog) == 2 and "_pipec_welford" in prog.kernels[0].source
    torch.manual_seed(1)
    x = (torch.randn(rows, cols) * 3 + 100).to(DT[dtype])  # a large mean: cancellation would show
    if rows >= 3 and cols > 1:
        x[2, 1] = math.inf
    y, var, mean = run_program(prog, [x], constants={"RBLOCK": rblock})
    xf = x.float()
    ref_var = xf.var(-1, unbiased=False)
    torch.testing.assert_close(var, ref_var.to(x.dtype), equal_nan=True)
    torch.testing.assert_close(mean, xf.mean(-1, keepdim=True).to(x.dtype), equal_nan=True)
    ref_y = (xf - xf.mean(-1, keepdim=True)) * torch.rsqrt(ref_var[:, None] + 1e-5)
    torch.testing.assert_close(y, ref_y.to(x.dtype), equal_nan=True)


def test_a_mean_over_another_count_is_not_welford(builder):
    g, k = variance_kernel(builder, 3, 10)
    nodes = tuple(n if n.name != "n" else n.__class__(n.name, n.op, n.inputs, n.type, (("value", 9.0),))
                  for n in g.nodes)
    g = g.__class__(g.name, g.inputs, nodes, g.outputs)
    prog = compile_one(g, k)
    assert "_pipec_welford" not in prog.kernels[0].source and loops(prog) == 3
    x = torch.randn(3, 10)
    _, var, _ = run_program(prog, [x], constants={"RBLOCK": 4})
    torch.testing.assert_close(var, ((x - x.sum(-1, keepdim=True) / 9) ** 2).sum(-1) / 10)


def test_independent_reductions_share_one_loop(builder):
    b = builder
    rows, cols = 4, 23
    x = b.input("x", (rows, cols))
    b.node("s", "sum", [x], (rows,), dims=(1,), keepdim=False)
    b.node("m", "min", [x], (rows,), dims=(1,), keepdim=False)
    b.node("am", "argmax", [x], (rows,), "int64", dims=(1,), keepdim=False)
    b.node("m_e", "reshape", ["m"], (rows, 1))
    b.node("m_x", "expand", ["m_e"], (rows, cols))
    b.node("d", "sub", [x, "m_x"], (rows, cols))
    b.node("sd", "sum", ["d"], (rows,), dims=(1,), keepdim=False)  # depends on m: a second loop
    g = b.graph(["s", "m", "am", "sd"])
    k = kernel("pipec_fused_sum_min_argmax_0", "reduction", [n.name for n in g.nodes], ["x"],
               ["s", "m", "am", "sd"], (rows, cols), (1,))
    prog = compile_one(g, k)
    assert loops(prog) == 2
    torch.manual_seed(2)
    xv = torch.randn(rows, cols)
    xv[1, 5] = math.nan  # min propagates NaN; argmax picks the NaN
    s, m, am, sd = run_program(prog, [xv], constants={"RBLOCK": 8})
    torch.testing.assert_close(s, xv.sum(-1), equal_nan=True)
    torch.testing.assert_close(m, xv.amin(-1), equal_nan=True)
    torch.testing.assert_close(am, xv.argmax(-1))
    torch.testing.assert_close(sd, (xv - xv.amin(-1, keepdim=True)).sum(-1), equal_nan=True)


@pytest.mark.parametrize("shape,dims", [((70, 24), (0,)), ((3, 67, 20), (1,)), ((40, 6), (0,))])
def test_column_reductions_run_along_the_contiguous_dim(builder, shape, dims):
    b = builder
    x = b.input("x", shape)
    out_shape = tuple(s for d, s in enumerate(shape) if d not in dims)
    b.node("s", "sum", [x], out_shape, dims=dims, keepdim=False)
    b.node("m", "max", [x], out_shape, dims=dims, keepdim=False)
    g = b.graph(["s", "m"])
    k = kernel("pipec_fused_sum_max_0", "reduction", ["s", "m"], ["x"], ["s", "m"], shape, dims)
    prog = generate_program(KernelPlan(g, "test", (k,)), CompileOptions())
    [kern] = prog.kernels
    first = dict(kern.configs[0].constants)
    assert first["XBLOCK"] >= min(16, shape[-1])  # many contiguous columns per program
    assert (loops(prog) == 1) == (shape[dims[0]] > 64)  # long columns loop, short ones are persistent
    torch.manual_seed(3)
    xv = torch.randn(shape)
    xv.view(-1)[7] = math.nan
    s, m = run_program(prog, [xv])
    torch.testing.assert_close(s, xv.sum(dims), equal_nan=True)
    torch.testing.assert_close(m, xv.amax(dims), equal_nan=True)


def test_persistent_max_propagates_nan_and_handles_int(builder):
    b = builder
    x = b.input("x", (4, 9))
    i = b.input("i", (4, 9), "int32")
    b.node("m", "max", [x], (4,), dims=(1,), keepdim=False)
    b.node("mi", "min", [i], (4,), "int32", dims=(1,), keepdim=False)
    g = b.graph(["m", "mi"])
    k = kernel("pipec_fused_max_min_0", "reduction", ["m", "mi"], ["x", "i"], ["m", "mi"], (4, 9), (1,))
    prog = generate_program(KernelPlan(g, "test", (k,)), CompileOptions())
    src = prog.kernels[0].source
    assert "_pipec_fmax" in src and "_pipec_minimum" in src  # float: max.NaN; int: compare
    xv = torch.randn(4, 9)
    xv[0, 3] = math.nan
    iv = torch.randint(-50, 50, (4, 9), dtype=torch.int32)
    m, mi = run_program(prog, [xv, iv])
    torch.testing.assert_close(m, xv.amax(-1), equal_nan=True)
    torch.testing.assert_close(mi, iv.amin(-1))


def _row_kernel(builder, cols, dtype):
    g, k = softmax_kernel(builder, 2, cols, dtype)
    return KernelWriter(g, k).write()


@pytest.mark.parametrize("cols,dtype,persistent", [(8192, "bfloat16", True), (32768, "float32", True),
                                                    (32768, "bfloat16", True), (20000, "float16", True),
                                                    (32769, "float32", False), (65536, "bfloat16", False),
                                                    (32768, "float64", False), (16384, "float64", True)])
def test_persistent_rows_by_bytes(builder, cols, dtype, persistent):
    """A row is held when its values, as held (half types in fp32), fit 128 KiB."""
    assert _row_kernel(builder, cols, dtype).persistent == persistent


def test_persistent_rows_count_every_row_input(builder):
    """Two row inputs of 32768 (a residual add before the reduction) hold twice as much: looped."""
    def two_inputs(cols):
        x, y = builder.input("x", (2, cols), "bfloat16"), builder.input("y", (2, cols), "bfloat16")
        builder.node("add", "add", [x, y], (2, cols), "bfloat16")
        builder.node("total", "sum", ["add"], (2, 1), "bfloat16", dims=(1,), keepdim=True)
        g = builder.graph(["total"])
        k = kernel("pipec_fused_add_sum_0", "reduction", ["add", "total"], ["x", "y"], ["total"], (2, cols), (1,))
        return KernelWriter(g, k).persistent
    assert two_inputs(16384) and not two_inputs(32768)


@pytest.mark.parametrize("cols,dtype,persistent", [(30522, "bfloat16", False), (8192, "bfloat16", True),
                                                    (4096, "float32", True)])
def test_a_row_wide_iota_counts_as_a_held_row(builder, cols, dtype, persistent):
    """Cross entropy's backward compares each column number with the row's label (a one-hot):
    that int64 iota counts as a row the kernel holds, so BERT's 30522-word rows loop (measured
    faster on the H200) while a softmax row of the same length is held."""
    x = builder.input("x", (2, cols), dtype)
    label = builder.input("label", (2, 1), "int64")
    builder.node("cols", "iota", [], (2, cols), "int64", dim=1, start=0, step=1)
    builder.node("hot", "eq", ["cols", label], (2, cols), "bool")
    builder.node("xf", "cast", [x], (2, cols), "float32")
    builder.node("zero", "full", [], (2, cols), "float32", value=0.0)
    builder.node("picked", "where", ["hot", "xf", "zero"], (2, cols), "float32")
    builder.node("total", "sum", ["picked"], (2, 1), "float32", dims=(1,), keepdim=True)
    g = builder.graph(["total"])
    k = kernel("pipec_fused_iota_eq_sum_0", "reduction", ["cols", "hot", "xf", "zero", "picked", "total"],
               ["x", "label"], ["total"], (2, cols), (1,))
    assert KernelWriter(g, k).persistent == persistent
    assert _row_kernel(Builder(), cols, dtype).persistent  # the same row without a one-hot is held


def test_rows_ask_l2_to_keep_what_is_read_again(builder):
    """A persistent row loads with evict_last (measured faster on the H200). A looped softmax
    reads its row twice: the first pass keeps the lines for the second, the last read takes the
    default policy. The numerics are the same either way."""
    g, k = softmax_kernel(builder, 8, 64, "bfloat16")
    persistent = compile_one(g, k, CompileOptions()).kernels[0].source
    looped = compile_one(g, k, LOOPED).kernels[0].source
    assert "for roffset in range" not in persistent
    assert persistent.count("eviction_policy='evict_last'") == persistent.count("tl.load(") == 1
    first, second = looped.split("for roffset in range")[1:]
    assert "tl.load(in_ptr0" in first and "eviction_policy='evict_last'" in first
    assert "tl.load(in_ptr0" in second and "eviction_policy" not in second
    assert "@l2:" not in looped
    x = softmax_inputs(8, 64, "bfloat16")
    for program, constants in ((compile_one(g, k, CompileOptions()), None), (compile_one(g, k, LOOPED), {"RBLOCK": 16})):
        out, _ = run_program(program, [x], constants=constants)
        torch.testing.assert_close(out, torch.softmax(x.float(), -1).to(x.dtype), equal_nan=True)


def test_a_row_read_in_one_pass_only_takes_the_default(builder):
    """A sum over a looped row reads it once: no pass comes after, so no hint."""
    x = builder.input("x", (4, 96), "float32")
    builder.node("total", "sum", [x], (4, 1), "float32", dims=(1,), keepdim=True)
    g = builder.graph(["total"])
    source = compile_one(g, kernel("pipec_fused_sum_0", "reduction", ["total"], ["x"], ["total"], (4, 96),
                                   (1,))).kernels[0].source
    assert "for roffset in range" in source and "eviction_policy" not in source and "@l2:" not in source


def test_row_configs_scale_warps_with_the_row():
    n = sympy.Integer
    [*long_rows] = reduction_configs(n(8192), n(8192), persistent=True)
    assert long_rows[0].num_warps == 16 and dict(long_rows[0].constants) == {"XBLOCK": 1, "RBLOCK": 8192}
    assert {c.num_warps for c in long_rows} >= {8, 16}
    short = reduction_configs(n(8192), n(100), persistent=True)
    assert dict(short[0].constants)["XBLOCK"] > 1  # several short rows per program
    columns = reduction_configs(n(4096), n(100000), persistent=False, outer=True)
    assert all(dict(c.constants)["XBLOCK"] >= 16 for c in columns)


@pytest.mark.parametrize("name", ["persistent_reduction_bytes", "persistent_reduction_limit"])
@pytest.mark.parametrize("bad", ["abc", -1, 2.5, True])
def test_row_budget_options_must_be_counts(builder, name, bad):
    g, k = softmax_kernel(builder, 2, 8)
    with pytest.raises(CodegenError, match=f"{name} must be a non-negative integer, got {bad!r}"):
        compile_one(g, k, CompileOptions().with_extra(**{name: bad}))


def layer_norm_backward_kernel(b, rows, cols, dtype="float32"):
    """layer_norm's input gradient as AOTAutograd writes it, with grad * x_hat kept for the weight's
    gradient: grad, grad * weight and x_hat are all still needed after the second sum."""
    shape, per_row = (rows, cols), (rows, 1)
    gy, x, w = b.input("gy", shape, dtype), b.input("x", shape, dtype), b.input("w", (cols,), dtype)
    mean, rstd = b.input("mean", per_row, "float32"), b.input("rstd", per_row, "float32")
    b.node("g", "cast", [gy], shape, "float32")
    b.node("xf", "cast", [x], shape, "float32")
    b.node("w_r", "reshape", [w], (1, cols), dtype)
    b.node("w_e", "expand", ["w_r"], shape, dtype)
    b.node("wf", "cast", ["w_e"], shape, "float32")
    b.node("gw", "mul", ["g", "wf"], shape, "float32")
    b.node("s1", "sum", ["gw"], per_row, "float32", dims=(1,), keepdim=True)
    b.node("mean_e", "expand", [mean], shape, "float32")
    b.node("rstd_e", "expand", [rstd], shape, "float32")
    b.node("xc", "sub", ["xf", "mean_e"], shape, "float32")
    b.node("xhat", "mul", ["xc", "rstd_e"], shape, "float32")
    b.node("gwx", "mul", ["gw", "xhat"], shape, "float32")
    b.node("s2", "sum", ["gwx"], per_row, "float32", dims=(1,), keepdim=True)
    b.node("gxhat", "mul", ["g", "xhat"], shape, "float32")
    b.node("s1_e", "expand", ["s1"], shape, "float32")
    b.node("s2_e", "expand", ["s2"], shape, "float32")
    b.node("a", "sub", ["gw", "s1_e"], shape, "float32")
    b.node("bterm", "mul", ["xhat", "s2_e"], shape, "float32")
    b.node("c", "sub", ["a", "bterm"], shape, "float32")
    b.node("dxf", "mul", ["c", "rstd_e"], shape, "float32")
    b.node("dx", "cast", ["dxf"], shape, dtype)
    g = b.graph(["dx", "gxhat"])
    names = [n.name for n in g.nodes]
    return g, kernel("pipec_fused_ln_backward_0", "reduction", names, ["gy", "x", "w", "mean", "rstd"],
                     ["dx", "gxhat"], shape, (1,))


@pytest.mark.parametrize("cols,dtype", [(8192, "float32"), (16384, "float32"), (16384, "bfloat16")])
def test_layer_norm_backward_rows_are_held_by_their_inputs(builder, cols, dtype):
    """Two row inputs (gradient and x) decide; the three rows live across the second sum do not
    (counting them looped fp32 16384, 44% slower on the H200)."""
    g, k = layer_norm_backward_kernel(builder, 2, cols, dtype)
    assert KernelWriter(g, k).persistent


@pytest.mark.parametrize("options,constants", [(CompileOptions(), None), (LOOPED, {"RBLOCK": 16})])
def test_layer_norm_backward_rows_held_or_looped(builder, options, constants):
    g, k = layer_norm_backward_kernel(builder, 5, 48, "float32")
    torch.manual_seed(0)
    gy, x, w = torch.randn(5, 48), torch.randn(5, 48), torch.randn(48)
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    rstd = torch.rsqrt(var + 1e-5)
    dx, gxhat = run_program(compile_one(g, k, options), [gy, x, w, mean, rstd], constants=constants)
    xhat, gw = (x - mean) * rstd, gy * w
    expected = (gw - gw.sum(-1, keepdim=True) - xhat * (gw * xhat).sum(-1, keepdim=True)) * rstd
    torch.testing.assert_close(dx, expected)
    torch.testing.assert_close(gxhat, gy * xhat)


@pytest.mark.parametrize("rows,limit,persistent", [(4096, None, False), (4096, 4096, False), (32, 4096, True),
                                                   (32, None, True), (32, 16, False)])
def test_columns_are_held_only_when_short_whatever_the_row_limit(builder, rows, limit, persistent):
    """A column of 4096 rows loops even under persistent_reduction_limit=4096 (held, layer_norm's
    weight-gradient sum ran 7x slower on the H200); a short one is held unless the limit is lower."""
    x = builder.input("x", (rows, 64), "float32")
    builder.node("total", "sum", [x], (64,), "float32", dims=(0,), keepdim=False)
    g = builder.graph(["total"])
    k = kernel("pipec_sum_0", "reduction", ["total"], ["x"], ["total"], (rows, 64), (0,))
    assert KernelWriter(g, k, persistent_limit=limit).persistent == persistent


def test_every_ir_reduction_has_a_triton_row():
    """Adding a reduction to pipec_ir.ops.OPS needs a row in reductions.py (and nothing else in codegen)."""
    from pipec_codegen_triton.reductions import TRITON_REDUCTIONS, identity_literal
    from pipec_ir.ops import REDUCTION_OPS

    assert set(TRITON_REDUCTIONS) == REDUCTION_OPS
    assert {op: identity_literal(op, "int32") for op in ("sum", "prod", "any")} == {"sum": "0", "prod": "1", "any": "0"}
