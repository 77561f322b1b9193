import pytest
import torch
from pipec_codegen_triton import generate_program
from pipec_ir import CompileOptions, KernelPlan, dumps, get_attr, loads
from pipec_ir.verify import verify_program

from conftest import DEVICE, kernel, run_program

OPTS = CompileOptions()


def compile_plan(graph, kernels, options=OPTS):
    plan = KernelPlan(graph, "test", tuple(kernels))
    program = generate_program(plan, options)
    assert loads(dumps(program)) == program
    verify_program(program)
    return program


def test_pointwise_chain_with_broadcast_and_permute(builder):
    b = builder
    x = b.input("x", (6, 10))
    bias = b.input("bias", (6,))
    b.node("xt", "permute", [x], (10, 6), dims=(1, 0))
    b.node("b2", "reshape", [bias], (1, 6))
    b.node("be", "expand", ["b2"], (10, 6))
    b.node("add", "add", ["xt", "be"], (10, 6))
    b.node("g", "gelu", ["add"], (10, 6), approximate="none")
    g = b.graph(["g"])
    prog = compile_plan(g, [kernel("pipec_fused_add_gelu_0", "pointwise", ["xt", "b2", "be", "add", "g"],
                                   ["x", "bias"], ["g"], (10, 6))])
    src = prog.kernels[0].source
    assert "def pipec_fused_add_gelu_0" in src and "mask=xmask" in src
    torch.manual_seed(0)
    xv, bv = torch.randn(6, 10), torch.randn(6)
    (out,) = run_program(prog, [xv, bv])
    torch.testing.assert_close(out, torch.nn.functional.gelu(xv.t() + bv))


def softmax_graph(b, rows, cols, dtype="float32"):
    x = b.input("x", (rows, cols), dtype)
    b.node("amax", "max", [x], (rows, 1), dtype, dims=(1,), keepdim=True)
    b.node("amax_e", "expand", ["amax"], (rows, cols), dtype)
    b.node("sub", "sub", [x, "amax_e"], (rows, cols), dtype)
    b.node("exp", "exp", ["sub"], (rows, cols), dtype)
    b.node("sum", "sum", ["exp"], (rows, 1), dtype, dims=(1,), keepdim=True)
    b.node("sum_e", "expand", ["sum"], (rows, cols), dtype)
    b.node("div", "div", ["exp", "sum_e"], (rows, cols), dtype)
    return b.graph(["div", "amax"])


@pytest.mark.parametrize("limit", [4096, 8])  # one pass, and a loop over the row
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_softmax_single_kernel(builder, limit, dtype):
    rows, cols = 7, 37
    g = softmax_graph(builder, rows, cols, dtype)
    k = kernel("pipec_fused_max_sub_exp_sum_0", "reduction",
               ["amax", "amax_e", "sub", "exp", "sum", "sum_e", "div"], ["x"], ["div", "amax"], (rows, cols), (1,))
    prog = compile_plan(g, [k], CompileOptions().with_extra(persistent_reduction_limit=limit))
    src = prog.kernels[0].source
    assert ("for roffset in range" in src) == (limit == 8)
    torch.manual_seed(0)
    x = torch.randn(rows, cols, dtype=getattr(torch, dtype))
    out, amax = run_program(prog, [x])
    torch.testing.assert_close(out, torch.softmax(x.float(), -1).to(x.dtype))
    torch.testing.assert_close(amax, x.amax(-1, keepdim=True))


@pytest.mark.parametrize("limit", [4096, 8])  # one pass, and a loop over the row
def test_static_sizes_that_the_blocks_divide_get_all_true_masks(builder, limit):
    """16 x 64 rows: every candidate XBLOCK divides 16 and RBLOCK divides 64, so the masks are
    constants (Triton drops them from loads, stores and selects); 7 x 37 keeps the compares."""
    k = kernel("pipec_fused_max_sub_exp_sum_0", "reduction",
               ["amax", "amax_e", "sub", "exp", "sum", "sum_e", "div"], ["x"], ["div", "amax"], (16, 64), (1,))
    prog = compile_plan(softmax_graph(builder, 16, 64), [k], CompileOptions().with_extra(persistent_reduction_limit=limit))
    src = prog.kernels[0].source
    assert "xmask = tl.full([XBLOCK, 1], True, tl.int1) if 16 % XBLOCK == 0 else xindex < xnumel" in src
    assert "rmask = tl.full([1, RBLOCK], True, tl.int1) if 64 % RBLOCK == 0 else rindex < rnumel" in src
    torch.manual_seed(0)
    x = torch.randn(16, 64)
    rblock = 8 if limit == 8 else 128  # 128 > 64: the masked path of a one-pass row
    for constants in ({"XBLOCK": 2}, {"XBLOCK": 32}, {"XBLOCK": 2, "RBLOCK": rblock}):  # dividing or not
        out, amax = run_program(prog, [x], constants)
        torch.testing.assert_close(out, torch.softmax(x, -1))
        torch.testing.assert_close(amax, x.amax(-1, keepdim=True))


def test_a_reduction_over_an_empty_static_dim_keeps_its_mask(builder):
    """rnumel 0: every RBLOCK divides 0, but no element 0 exists (an all-true mask read it)."""
    x = builder.input("x", (4, 0))
    builder.node("sum", "sum", [x], (4, 1), "float32", dims=(1,), keepdim=True)
    prog = compile_plan(builder.graph(["sum"]), [kernel("pipec_fused_sum_0", "reduction", ["sum"], ["x"], ["sum"],
                                                        (4, 0), (1,))])
    assert "rmask = rindex < rnumel" in prog.kernels[0].source
    (out,) = run_program(prog, [torch.randn(4, 0)])
    torch.testing.assert_close(out, torch.zeros(4, 1))


@pytest.mark.parametrize("limit", [4096, 4])
def test_reduce_leading_dim_and_argmax(builder, limit):
    b = builder
    x = b.input("x", (9, 5))
    b.node("s", "sum", [x], (5,), dims=(0,), keepdim=False)
    b.node("am", "argmax", [x], (5,), "int64", dims=(0,), keepdim=False)
    g = b.graph(["s", "am"])
    prog = compile_plan(g, [kernel("pipec_sum_0", "reduction", ["s", "am"], ["x"], ["s", "am"], (9, 5), (0,))],
                        CompileOptions().with_extra(persistent_reduction_limit=limit))
    torch.manual_seed(1)
    xv = torch.randn(9, 5)
    s, am = run_program(prog, [xv])
    torch.testing.assert_close(s, xv.sum(0))
    torch.testing.assert_close(am, xv.argmax(0))


def test_layer_norm_epilogue_with_weight(builder):
    b = builder
    n, d = 6, 20
    x = b.input("x", (n, d))
    w = b.input("w", (d,))
    b.node("s", "sum", [x], (n, 1), dims=(1,), keepdim=True)
    b.node("dn", "full", [], (n, 1), value=float(d))
    b.node("mean", "div", ["s", "dn"], (n, 1))
    b.node("mean_e", "expand", ["mean"], (n, d))
    b.node("xc", "sub", [x, "mean_e"], (n, d))
    b.node("sq", "mul", ["xc", "xc"], (n, d))
    b.node("ss", "sum", ["sq"], (n, 1), dims=(1,), keepdim=True)
    b.node("var", "div", ["ss", "dn"], (n, 1))
    b.node("eps", "full", [], (n, 1), value=1e-5)
    b.node("ve", "add", ["var", "eps"], (n, 1))
    b.node("rstd", "rsqrt", ["ve"], (n, 1))
    b.node("rstd_e", "expand", ["rstd"], (n, d))
    b.node("y", "mul", ["xc", "rstd_e"], (n, d))
    b.node("w2", "reshape", [w], (1, d))
    b.node("we", "expand", ["w2"], (n, d))
    b.node("out", "mul", ["y", "we"], (n, d))
    g = b.graph(["out", "rstd"])
    names = [nd.name for nd in g.nodes]
    for limit in (4096, 8):
        prog = compile_plan(g, [kernel("pipec_fused_layer_norm_0", "reduction", names, ["x", "w"], ["out", "rstd"],
                                       (n, d), (1,))], CompileOptions().with_extra(persistent_reduction_limit=limit))
        torch.manual_seed(2)
        xv, wv = torch.randn(n, d), torch.randn(d)
        out, rstd = run_program(prog, [xv, wv])
        ref = torch.nn.functional.layer_norm(xv, (d,), wv, eps=1e-5)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rstd, torch.rsqrt(xv.var(1, unbiased=False, keepdim=True) + 1e-5))


def test_matmul_and_view_steps_with_memory_reuse(builder):
    b = builder
    x = b.input("x", (4, 8))
    w = b.input("w", (16, 8))
    b.node("wt", "permute", [w], (8, 16), dims=(1, 0))
    b.node("mm", "mm", [x, "wt"], (4, 16))
    b.node("r", "relu", ["mm"], (4, 16))
    b.node("e", "exp", ["r"], (4, 16))
    b.node("n", "neg", ["e"], (4, 16))
    g = b.graph(["n"])
    prog = compile_plan(g, [
        kernel("pipec_view_permute_0", "view", ["wt"], ["w"], ["wt"], ()),
        kernel("pipec_mm_1", "matmul", ["mm"], ["x", "wt"], ["mm"], ()),
        kernel("pipec_relu_2", "pointwise", ["r"], ["mm"], ["r"], (4, 16)),
        kernel("pipec_exp_3", "pointwise", ["e"], ["r"], ["e"], (4, 16)),
        kernel("pipec_neg_4", "pointwise", ["n"], ["e"], ["n"], (4, 16)),
    ])
    slots = {bf.name: bf.slot for bf in prog.buffers}
    assert slots["r"] is not None and slots["e"] is not None and slots["n"] is None
    assert len(prog.slots) == 1  # e = exp(r) overwrites r in place; n is an output
    assert get_attr(prog.steps[3].attrs, "inplace") == (("e", "r"),)
    torch.manual_seed(3)
    xv, wv = torch.randn(4, 8), torch.randn(16, 8)
    (out,) = run_program(prog, [xv, wv])
    torch.testing.assert_close(out, -torch.exp(torch.relu(xv @ wv.t())))


def test_reshape_index_collapses_to_flat_index(builder):
    b = builder
    x = b.input("x", (4, 6, 8))
    b.node("v", "reshape", [x], (24, 8))
    b.node("y", "sigmoid", ["v"], (24, 8))
    g = b.graph(["y"])
    prog = compile_plan(g, [kernel("pipec_sigmoid_0", "pointwise", ["v", "y"], ["x"], ["y"], (24, 8))])
    assert "tl.load(in_ptr0 + (xindex)" in prog.kernels[0].source
    xv = torch.randn(4, 6, 8)
    (out,) = run_program(prog, [xv])
    torch.testing.assert_close(out, torch.sigmoid(xv.reshape(24, 8)))


def test_view_returned_to_the_caller_keeps_its_source_alive(builder):
    """A graph output that is a view of an intermediate: the intermediate's slot is never reused."""
    b = builder
    x = b.input("x", (4, 4))
    b.node("a", "abs", [x], (4, 4))
    b.node("flat", "reshape", ["a"], (16,))
    b.node("e", "exp", [x], (4, 4))
    b.node("n", "neg", ["e"], (4, 4))
    g = b.graph(["flat", "n"])
    prog = compile_plan(g, [
        kernel("pipec_abs_0", "pointwise", ["a"], ["x"], ["a"], (4, 4)),
        kernel("pipec_view_reshape_1", "view", ["flat"], ["a"], ["flat"], ()),
        kernel("pipec_exp_2", "pointwise", ["e"], ["x"], ["e"], (4, 4)),
        kernel("pipec_neg_3", "pointwise", ["n"], ["e"], ["n"], (4, 4)),
    ])
    slots = {bf.name: bf.slot for bf in prog.buffers}
    assert slots["a"] != slots["e"]
    xv = torch.randn(4, 4)
    flat, n = run_program(prog, [xv])
    torch.testing.assert_close(flat, xv.abs().reshape(16))
    torch.testing.assert_close(n, -xv.exp())


def test_same_kernel_name_in_two_programs_gets_its_own_index_symbols(builder):
    """Regression (found by the fuzzer): index symbols carry upper bounds that drop a `% size`,
    and sympy caches evaluations process-wide, so two kernels of the same name over other sizes
    (in two programs) must not share symbols, or one kernel's bounds simplify the other's
    indices. The bound is in the symbol (pipec_ir.symbolic.bounded_index): equal bounds share a
    symbol and print the same kernel, whatever ran in between."""
    from pipec_codegen_triton.writer import KernelWriter
    from pipec_ir.symbolic import upper_bound

    def exp_kernel(cols):
        x = builder.input(f"x{cols}", (4, cols))
        builder.node(f"y{cols}", "exp", [x], (4, cols))
        g = builder.graph([f"y{cols}"])
        return g, kernel("pipec_exp_0", "pointwise", [f"y{cols}"], [f"x{cols}"], [f"y{cols}"], (4, cols))

    narrow, wide = exp_kernel(8), exp_kernel(16)
    first = KernelWriter(*narrow)
    before = first.write().source
    other = KernelWriter(*wide)
    assert [upper_bound(s) for s in first.xsyms] == [3, 7] and [upper_bound(s) for s in other.xsyms] == [3, 15]
    assert "% 16" in other.write().source.replace("(", "").replace(")", "")
    again = KernelWriter(*narrow)
    assert again.xsyms == first.xsyms and again.write().source == before


def test_half_gelu_matches_eager_and_its_helper_is_accurate(builder, tmp_path):
    """A bf16 GELU uses `_pipec_gelu_half` (erfc's polynomial, no libdevice): the kernel matches
    eager, and the helper itself, run in fp32, stays within 3e-7 of float64's x * Phi(x)."""
    import importlib.util

    import triton

    from pipec_codegen_triton.triton_helpers import HELPERS

    b = builder
    x = b.input("x", (4096,), "bfloat16")
    b.node("g", "gelu", [x], (4096,), "bfloat16", approximate="none")
    prog = compile_plan(b.graph(["g"]), [kernel("pipec_gelu_0", "pointwise", ["g"], ["x"], ["g"], (4096,))])
    src = prog.kernels[0].source
    assert "def _pipec_gelu_half(x):" in src and "tl.erf" not in src
    xv = torch.linspace(-8, 8, 4096).to(torch.bfloat16)
    (out,) = run_program(prog, [xv])
    torch.testing.assert_close(out, torch.nn.functional.gelu(xv))

    module = tmp_path / "gelu_helper.py"  # Triton reads a kernel's source from its file
    module.write_text("import triton\nimport triton.language as tl\n" + HELPERS + """

@triton.jit
def apply(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, _pipec_gelu_half(tl.load(x_ptr + i, mask=i < n)), mask=i < n)
""")
    spec = importlib.util.spec_from_file_location("gelu_helper", module)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    apply = loaded.apply

    xs = torch.cat([torch.linspace(-10, 10, 3001), torch.tensor([0.0, -0.0, 1e-30, -1e-30, 40.0, -40.0])])
    ys = torch.empty_like(xs, device=DEVICE)
    apply[(triton.cdiv(xs.numel(), 1024),)](xs.to(DEVICE), ys, xs.numel(), BLOCK=1024)
    exact = torch.nn.functional.gelu(xs.double())
    assert ((ys.cpu().double() - exact).abs() <= 3e-7 * (1 + xs.double().abs())).all()
    special = torch.tensor([float("nan"), float("inf"), -float("inf")], device=DEVICE)
    out = torch.empty_like(special)
    apply[(1,)](special, out, 3, BLOCK=4)
    out = out.cpu()
    assert torch.isnan(out[0]) and out[1] == float("inf") and torch.isnan(out[2])  # as 0.5 * x * (1 + erf)
