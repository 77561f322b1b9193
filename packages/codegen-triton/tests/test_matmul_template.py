"""The Triton GEMM template with fused epilogues, and its cuBLAS alternative (docs/IR.md, "Choice groups").

CPU runs use Triton's interpreter (fp32 only: it gets bf16 tl.dot wrong); bf16 runs on the GPU.
Each alternative is run on its own, so the template is checked, not hidden behind cuBLAS.
"""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
from pipec_codegen_triton import generate_program
from pipec_codegen_triton.matmul_template import operand_layout, template_configs
from pipec_ir import CompileOptions, KernelPlan, dumps, get_attr, loads
from pipec_ir.symbolic import index_symbol

from conftest import DEVICE, Builder, kernel, run_program

OPTS = CompileOptions()
ACTIVATIONS = {
    "gelu": (dict(op="gelu", approximate="none"), lambda y: torch.nn.functional.gelu(y)),
    "gelu_tanh": (dict(op="gelu", approximate="tanh"), lambda y: torch.nn.functional.gelu(y, approximate="tanh")),
    "relu": (dict(op="relu"), torch.relu),
    "silu": (dict(op="silu"), torch.nn.functional.silu),
}


def only(program, alternative):
    """The program with the steps of every other alternative dropped."""
    steps = tuple(s for s in program.steps if get_attr(s.attrs, "alternative") in (None, alternative))
    return dataclasses.replace(program, steps=steps)


def compile_plan(graph, kernels, options=OPTS):
    program = generate_program(KernelPlan(graph, "default", tuple(kernels)), options)
    assert loads(dumps(program)) == program
    return program


def linear(b, m, k, n, act, dtype="float32", residual=False):
    """x @ w.T + bias -> activation (-> * 0.5 + residual): a Linear with its epilogue as one matmul kernel."""
    x, w, bias = b.input("x", (m, k), dtype), b.input("w", (n, k), dtype), b.input("bias", (n,), dtype)
    b.node("wt", "permute", [w], (k, n), dtype, dims=(1, 0))
    b.node("mm", "mm", [x, "wt"], (m, n), dtype)
    b.node("bias_row", "reshape", [bias], (1, n), dtype)
    b.node("bias_full", "expand", ["bias_row"], (m, n), dtype)
    b.node("add", "add", ["mm", "bias_full"], (m, n), dtype)
    attrs = dict(ACTIVATIONS[act][0])
    b.node("act", attrs.pop("op"), ["add"], (m, n), dtype, **attrs)
    nodes, inputs, out = ["mm", "bias_row", "bias_full", "add", "act"], ["x", "wt", "bias"], "act"
    if residual:
        r = b.input("r", (m, n), dtype)
        b.node("half", "full", [], (m, n), dtype, value=0.5)
        b.node("scaled", "mul", ["act", "half"], (m, n), dtype)
        b.node("out", "add", ["scaled", r], (m, n), dtype)
        nodes += ["half", "scaled", "out"]
        inputs.append(r)
        out = "out"
    graph = b.graph([out])
    kernels = [kernel("pipec_view_permute_0", "view", ["wt"], ["w"], ["wt"], ()),
               kernel("pipec_fused_mm_add_1", "matmul", nodes, inputs, [out], (m, n))]
    return graph, kernels


def reference(act, x, w, bias, r=None):
    y = ACTIVATIONS[act][1](x @ w.t() + bias)
    return y if r is None else y * 0.5 + r


@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize("alternative", ["template", "library"])
def test_linear_epilogue_matches_eager(builder, act, alternative):
    graph, kernels = linear(builder, 16, 32, 24, act, residual=act == "gelu")
    program = compile_plan(graph, kernels)
    torch.manual_seed(0)
    xs = [torch.randn(16, 32), torch.randn(24, 32), torch.randn(24)] + ([torch.randn(16, 24)] if act == "gelu" else [])
    (out,) = run_program(only(program, alternative), xs)
    torch.testing.assert_close(out, reference(act, *xs))


def test_odd_edges_several_tiles_grouped(builder):
    """17 x 33 @ 33 x 23 in 16 x 16 x 16 tiles: edge tiles in M, N and K, and a short last group."""
    graph, kernels = linear(builder, 17, 33, 23, "relu", residual=True)
    program = only(compile_plan(graph, kernels), "template")
    src = program.kernels[0].source
    assert "mask=rk[None, :] < K - k * BLOCK_K" in src  # K = 33: the K loop is masked
    torch.manual_seed(1)
    xs = [torch.randn(17, 33), torch.randn(23, 33), torch.randn(23), torch.randn(17, 23)]
    (out,) = run_program(program, xs, constants={"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2})
    torch.testing.assert_close(out, reference("relu", *xs))


def test_program_holds_both_alternatives_as_one_choice_group(builder):
    graph, kernels = linear(builder, 16, 32, 24, "gelu")
    program = compile_plan(graph, kernels)
    steps = {(s.target, get_attr(s.attrs, "alternative")): s for s in program.steps}
    template = steps[("pipec_fused_mm_add_1", "template")]
    addmm = steps[("aten.addmm.default", "library")]
    epilogue = steps[("pipec_fused_mm_add_1_epilogue", "library")]
    assert {get_attr(s.attrs, "choice") for s in (template, addmm, epilogue)} == {"pipec_fused_mm_add_1"}
    assert get_attr(template.attrs, "default") is True and get_attr(addmm.attrs, "default") is None
    assert template.inputs == ("x", "w", "bias")  # the weight is read through the permute: strides, no copy
    assert addmm.inputs == ("bias", "x", "wt") and addmm.outputs == ("add",)  # the bias goes into cuBLAS
    assert epilogue.inputs == ("add",) and template.outputs == epilogue.outputs == ("act",)
    assert [b.name for b in program.buffers].count("act") == 1
    src = program.kernel_map()["pipec_fused_mm_add_1"].source
    assert "tl.dot(a, b, acc, input_precision=\"ieee\")" in src  # fp32 as eager computes it: no TF32
    assert "GROUP_M" in src and "tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)" in src
    assert "tl.erf" in src  # the epilogue went through the pointwise expression table


def test_template_can_be_turned_off(builder):
    graph, kernels = linear(builder, 16, 32, 24, "relu")
    program = compile_plan(graph, kernels, OPTS.with_extra(matmul_template=False))
    assert [s.target for s in program.steps] == ["aten.permute.default", "aten.addmm.default",
                                                 "pipec_fused_mm_add_1_epilogue"]
    assert all(get_attr(s.attrs, "choice") is None for s in program.steps)


def test_bmm_epilogue_and_stored_product(builder):
    """A batched product that is also returned: the template stores the accumulator too."""
    b = builder
    x, y, r = b.input("x", (2, 9, 16)), b.input("y", (2, 16, 12)), b.input("r", (2, 9, 12))
    b.node("p", "bmm", [x, y], (2, 9, 12))
    b.node("s", "sigmoid", ["p"], (2, 9, 12))
    b.node("o", "add", ["s", r], (2, 9, 12))
    graph = b.graph(["o", "p"])
    program = compile_plan(graph, [kernel("pipec_fused_bmm_sigmoid_0", "matmul", ["p", "s", "o"], [x, y, r],
                                          ["p", "o"], (2, 9, 12))])
    torch.manual_seed(2)
    xs = [torch.randn(2, 9, 16), torch.randn(2, 16, 12), torch.randn(2, 9, 12)]
    want = torch.bmm(xs[0], xs[1])
    for alternative in ("template", "library"):
        o, p = run_program(only(program, alternative), xs)
        torch.testing.assert_close(p, want)
        torch.testing.assert_close(o, torch.sigmoid(want) + xs[2])


def test_reshaped_operand_is_read_in_place_and_scrambled_one_is_not(builder):
    b = builder
    x = b.input("x", (2, 8, 32))
    p = b.input("p", (2, 3, 4))
    b.node("x2", "reshape", [x], (16, 32))
    b.node("pt", "permute", [p], (3, 2, 4), dims=(1, 0, 2))
    b.node("p2", "reshape", ["pt"], (6, 4))
    graph = b.graph(["x2", "p2"])
    i, k = index_symbol("i_t"), index_symbol("k_t")
    layout = operand_layout(graph, "x2", (i, k))
    assert layout.root == "x" and layout.strides == (32, 1) and layout.offset == 0
    assert operand_layout(graph, "p2", (i, k)) is None  # row i of p2 is not at a fixed stride in p


def test_scrambled_operand_keeps_cublas_only(builder):
    b = builder
    p, w = b.input("p", (2, 3, 4)), b.input("w", (4, 5))
    b.node("pt", "permute", [p], (3, 2, 4), dims=(1, 0, 2))
    b.node("p2", "reshape", ["pt"], (6, 4))
    b.node("mm", "mm", ["p2", w], (6, 5))
    b.node("e", "relu", ["mm"], (6, 5))
    graph = b.graph(["e"])
    program = compile_plan(graph, [
        kernel("pipec_view_permute_0", "view", ["pt"], ["p"], ["pt"], ()),
        kernel("pipec_view_reshape_1", "view", ["p2"], ["pt"], ["p2"], ()),
        kernel("pipec_fused_mm_relu_2", "matmul", ["mm", "e"], ["p2", "w"], ["e"], (6, 5))])
    assert [s.target for s in program.steps][2:] == ["aten.mm.default", "pipec_fused_mm_relu_2_epilogue"]
    torch.manual_seed(4)
    xs = [torch.randn(2, 3, 4), torch.randn(4, 5)]
    (out,) = run_program(program, xs)
    torch.testing.assert_close(out, torch.relu(xs[0].permute(1, 0, 2).reshape(6, 4) @ xs[1]))


def test_configs_fit_the_problem():
    (tiny,) = template_configs(16, 24, 32, "float32")
    assert dict(tiny.constants) == {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8,
                                    "GRID_M": 16, "GRID_N": 32}  # one tile per program
    big = template_configs(8192, 8192, 2048, "bfloat16")
    assert dict(big[0].constants)["BLOCK_K"] == 64 and big[0].num_warps == 8
    assert {dict(c.constants)["BLOCK_N"] for c in big} >= {128, 256}
    for c in big:  # software-pipelined A and B tiles fit Hopper's shared memory (227 KB per block)
        const = dict(c.constants)
        assert c.num_stages * (const["BLOCK_M"] + const["BLOCK_N"]) * const["BLOCK_K"] * 2 <= 227 * 1024


@pytest.mark.skipif(DEVICE != "cuda", reason="bf16 tl.dot needs the GPU (Triton's interpreter gets it wrong)")
@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "silu"])
def test_bf16_template_every_config_on_gpu(act):
    graph, kernels = linear(Builder(), 200, 256, 136, act, dtype="bfloat16", residual=True)
    program = only(compile_plan(graph, kernels), "template")
    torch.manual_seed(5)
    xs = [torch.randn(200, 256), torch.randn(136, 256) / 16, torch.randn(136), torch.randn(200, 136)]
    want = reference(act, *[t.cuda().to(torch.bfloat16) for t in xs])
    bf = [t.to(torch.bfloat16) for t in xs]
    for config in program.kernels[0].configs:
        (out,) = run_program(program, bf, constants=dict(config.constants))
        torch.testing.assert_close(out, want.cpu(), atol=5e-2, rtol=2e-2)


def test_half_gelu_epilogue_defines_its_helper(builder):
    """The template's epilogue calls `_pipec_gelu_half` for a bf16 GELU: the kernel module
    must define it (the interpreter's bf16 tl.dot is wrong, so numerics are checked on the GPU)."""
    graph, kernels = linear(builder, 16, 32, 24, "gelu", dtype="bfloat16")
    program = compile_plan(graph, kernels)
    for name in ("pipec_fused_mm_add_1", "pipec_fused_mm_add_1_epilogue"):
        src = program.kernel_map()[name].source
        assert "_pipec_gelu_half(" in src and "def _pipec_gelu_half(x):" in src, name


# ---------------------------------------------------------------- the persistent TMA variant


def tma_constants(subtile: int, grid_m: int = 32, grid_n: int = 64) -> dict:
    """16 x 32 x 16 tiles, each program walking GRID_M / 16 x GRID_N / 32 of them."""
    return {"TMA": 1, "SUBTILE": subtile, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2,
            "GRID_M": grid_m, "GRID_N": grid_n}


@pytest.mark.parametrize("subtile", [0, 1])
@pytest.mark.parametrize("grid", [(32, 64), (16, 32), (1 << 10, 1 << 10), (16, 1 << 10)])
def test_persistent_tma_matches_eager(builder, subtile, grid):
    """fp16 40 x 48 @ 48 x 72 (+ bias, GELU, residual) through TMA descriptors: edge tiles in M, N and
    K, programs walking several tiles (grid 32 x 64: 2 x 2 programs for 3 x 3 tiles), one tile each
    (16 x 32), a single program for all (1024 x 1024) and 3 programs in a 1-D grid (16 x 1024: the
    shape of the runtime's grid when it caps the programs at the GPU's SM count); the epilogue
    whole and in halves."""
    graph, kernels = linear(builder, 40, 48, 72, "gelu", dtype="float16", residual=True)
    program = only(compile_plan(graph, kernels), "template")
    src = program.kernels[0].source
    assert "tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[48, 1]" in src
    assert "b_desc.load([on, k * BLOCK_K]).T" in src  # the Linear's weight [N, K], transposed in SMEM
    torch.manual_seed(5)
    xs = [torch.randn(40, 48), torch.randn(72, 48) / 7, torch.randn(72), torch.randn(40, 72)]
    (out,) = run_program(program, [x.half() for x in xs], constants=tma_constants(subtile, *grid))
    torch.testing.assert_close(out.float(), reference("gelu", *xs), atol=1e-2, rtol=1e-2)


def test_tma_needs_unit_stride_aligned_operands(builder):
    """A K of 36 halves (72 bytes, not a multiple of 16) has no descriptor: no TMA branch, no TMA config."""
    graph, kernels = linear(builder, 40, 36, 72, "relu", dtype="float16")
    kern = only(compile_plan(graph, kernels), "template").kernels[0]
    assert "make_tensor_descriptor" not in kern.source and "TMA" not in dict(kern.configs[0].constants)


def test_tma_configs_only_for_large_products():
    small = template_configs(256, 256, 64, "bfloat16", tma=True)
    assert not any(dict(c.constants)["TMA"] for c in small)
    big = template_configs(8192, 8192, 2048, "bfloat16", tma=True)
    assert dict(big[0].constants)["TMA"] == 0  # untuned (and interpreted): the pointer kernel
    persistent = [dict(c.constants) for c in big if dict(c.constants)["TMA"]]
    assert persistent and all(c["BLOCK_M"] * c["BLOCK_N"] == 128 * 256 for c in persistent)
    for c in persistent:  # at most one program per SM of an H200, and as many as fit
        programs = -(-8192 // c["GRID_M"]) * -(-8192 // c["GRID_N"])
        assert 120 <= programs <= 132
    assert not any(dict(c.constants).get("TMA") for c in template_configs(8192, 8192, 2048, "float32", tma=True))


@pytest.mark.skipif(DEVICE != "cuda" or torch.cuda.get_device_capability()[0] < 9,
                    reason="TMA descriptors need a Hopper (or newer) GPU")
@pytest.mark.parametrize("subtile", [0, 1])
def test_bf16_persistent_tma_on_gpu(subtile):
    """The real persistent tiles (128 x 256 x 64, 8 warps) in bf16, with edges in M, N and K."""
    graph, kernels = linear(Builder(), 1000, 520, 1064, "gelu", dtype="bfloat16", residual=True)
    program = only(compile_plan(graph, kernels), "template")
    torch.manual_seed(6)
    xs = [torch.randn(1000, 520), torch.randn(1064, 520) / 23, torch.randn(1064), torch.randn(1000, 1064)]
    constants = {"TMA": 1, "SUBTILE": subtile, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
                 "GRID_M": 256, "GRID_N": 512}
    (out,) = run_program(program, [x.to(DEVICE, torch.bfloat16) for x in xs], constants=constants)
    torch.testing.assert_close(out.float(), reference("gelu", *xs), atol=5e-2, rtol=2e-2)


# ---------------------------------------------------------------- the Gluon ping-pong alternative


def _pingpong(program):
    return next((k for k in program.kernels if k.name.endswith("_pingpong")), None)


def test_pingpong_alternative_for_a_large_half_linear_with_exact_gelu():
    """bf16 4096 x 520 @ 520 x 4096 + bias + exact GELU: the Gluon ping-pong kernel is one more
    alternative of the group (never the default: the CPU interpreter cannot run it), with the
    template's arguments, a persistent TMA config and the register cap its partitions share."""
    graph, kernels = linear(Builder(), 4096, 520, 4096, "gelu", dtype="bfloat16")
    program = compile_plan(graph, kernels)
    kern = _pingpong(program)
    template = next(k for k in program.kernels if k.name == "pipec_fused_mm_add_1")
    assert kern.args == template.args and kern.sizes == template.sizes and kern.grid == template.grid
    # beside it the template keeps one persistent TMA config of two (compile time)
    assert sum(bool(dict(c.constants)["TMA"]) for c in template.configs) == 1
    (step,) = [s for s in program.steps if get_attr(s.attrs, "alternative") == "pingpong"]
    assert step.target == kern.name and not get_attr(step.attrs, "default", False)
    (config,) = kern.configs
    constants = dict(config.constants)
    assert constants["TMA"] == 1 and constants["MAXNREG"] == 168 and constants["BLOCK_N"] == 128
    assert -(-4096 // constants["GRID_M"]) * -(-4096 // constants["GRID_N"]) <= 132
    # the epilogue is the template's, spelled in Gluon; the output tile leaves through TMA
    assert "@gluon.jit" in kern.source and "tl." not in kern.source
    assert "_pipec_gelu_half(" in kern.source and "_tma_store(c_desc" in kern.source


@pytest.mark.parametrize("act, dtype", [("relu", "bfloat16"), ("gelu", "float32"), ("expm1", "bfloat16")])
def test_no_pingpong_where_it_cannot_pay_or_gluon_cannot_spell_the_epilogue(act, dtype):
    """A cheap epilogue (ReLU), fp32 operands (no wgmma tiles here), and an epilogue calling
    libdevice (expm1), which Gluon cannot."""
    if act == "expm1":
        b = Builder()
        graph, kernels = linear(b, 4096, 512, 4096, "relu", dtype=dtype)
        b.node("em1", "expm1", ["add"], (4096, 4096), dtype)
        nodes = tuple(n for n in kernels[1].nodes if n != "act") + ("em1",)
        kernels[1] = dataclasses.replace(kernels[1], nodes=nodes, outputs=("em1",))
        graph = b.graph(["em1"])
    else:
        graph, kernels = linear(Builder(), 4096, 512, 4096, act, dtype=dtype)
    program = compile_plan(graph, kernels)
    assert _pingpong(program) is None
    template = next(k for k in program.kernels if k.name == "pipec_fused_mm_add_1")
    assert sum(bool(dict(c.constants).get("TMA")) for c in template.configs) == (0 if dtype == "float32" else 2)


def test_no_pingpong_where_cublaslt_applies_the_activation():
    """A bias + tanh-GELU has cuBLASLt's own activation epilogue (`library_act`): no ping-pong
    kernel beside it, and the template keeps both persistent TMA configs."""
    graph, kernels = linear(Builder(), 4096, 512, 4096, "gelu_tanh", dtype="bfloat16")
    program = compile_plan(graph, kernels)
    assert _pingpong(program) is None
    assert any(get_attr(s.attrs, "alternative") == "library_act" for s in program.steps)
    template = next(k for k in program.kernels if k.name == "pipec_fused_mm_add_1")
    assert sum(bool(dict(c.constants).get("TMA")) for c in template.configs) == 2


@pytest.mark.parametrize("act", ["relu", "gelu_tanh"])
def test_max_autotune_offers_every_alternative(act):
    """`max_autotune` (the max-autotune modes): the ping-pong kernel also beside a cheap epilogue
    (ReLU) and beside cuBLASLt's activation epilogue (tanh-GELU), with every persistent TMA config
    of the template kept; default codegen leaves both out to save compile time."""
    graph, kernels = linear(Builder(), 4096, 512, 4096, act, dtype="bfloat16")
    default = compile_plan(graph, kernels)
    exhaustive = compile_plan(graph, kernels, OPTS.with_extra(max_autotune=True))
    assert _pingpong(default) is None and _pingpong(exhaustive) is not None
    alternatives = {get_attr(s.attrs, "alternative") for s in exhaustive.steps}
    assert alternatives == {get_attr(s.attrs, "alternative") for s in default.steps} | {"pingpong"}
    for program in (default, exhaustive):
        template = next(k for k in program.kernels if k.name == "pipec_fused_mm_add_1")
        assert sum(bool(dict(c.constants).get("TMA")) for c in template.configs) == 2


def _bias_free_linear(act):
    """x @ w.T -> activation: no bias, so no cuBLASLt activation epilogue to compete with."""
    b = Builder()
    x, w = b.input("x", (4096, 512), "bfloat16"), b.input("w", (4096, 512), "bfloat16")
    b.node("wt", "permute", [w], (512, 4096), "bfloat16", dims=(1, 0))
    b.node("mm", "mm", [x, "wt"], (4096, 4096), "bfloat16")
    attrs = dict(ACTIVATIONS[act][0])
    b.node("act", attrs.pop("op"), ["mm"], (4096, 4096), "bfloat16", **attrs)
    kernels = [kernel("pipec_view_permute_0", "view", ["wt"], ["w"], ["wt"], ()),
               kernel("pipec_fused_mm_gelu_1", "matmul", ["mm", "act"], ["x", "wt"], ["act"], (4096, 4096))]
    return b.graph(["act"]), kernels


@pytest.mark.parametrize("act, residual", [("gelu_tanh", False), ("silu", False), ("gelu", True)])
def test_pingpong_for_what_gluon_spells_differently(act, residual):
    """Triton's sigmoid (tanh-GELU, SiLU) becomes `_pipec_sigmoid`, the same arithmetic; a
    constant tile (`tl.full`, the residual's 0.5) gets the accumulator's layout."""
    if act == "gelu_tanh":
        graph, kernels = _bias_free_linear(act)
    else:
        graph, kernels = linear(Builder(), 4096, 512, 4096, act, dtype="bfloat16", residual=residual)
    kern = _pingpong(compile_plan(graph, kernels))
    assert kern is not None and "tl." not in kern.source
    if act == "gelu":
        assert "gl.full([BLOCK_M, BLOCK_N], 0.5, gl.float32, layout=ACC)" in kern.source
        assert "_pipec_sigmoid" not in kern.source
    else:
        assert kern.source.count("def _pipec_sigmoid(x):") == 1 and kern.source.count("_pipec_sigmoid(") == 2


def test_gluon_spelling_of_calls():
    """The respelling finds each call's closing parenthesis (nested calls inside), and refuses a
    tensor of another shape than the tile, or any tensor made outside the tile (a helper)."""
    from pipec_codegen_triton.matmul_gluon import gluon_lines

    line = "    t = tl.broadcast_to(tl.load(p + (0)).to(tl.float32), [BLOCK_M, BLOCK_N]) * tl.full([BLOCK_M, BLOCK_N], 2.0, tl.float32)"
    assert gluon_lines([line]) == [
        "    t = gl.broadcast(gl.load(p + (0)).to(gl.float32), acc)[0] * gl.full([BLOCK_M, BLOCK_N], 2.0, gl.float32, layout=ACC)"]
    assert gluon_lines(["    t = tl.full([BLOCK_M, 1], 0, tl.int32)"]) is None
    assert gluon_lines(["    t = tl.full([BLOCK_M, BLOCK_N], 0, tl.int32)"], in_tile=False) is None
    assert gluon_lines(["    t = libdevice.tanh(x)"]) is None
    assert gluon_lines(["    t = tl.cumsum(x, 0)"]) is None


@pytest.mark.parametrize("act, residual", [("gelu", False), ("silu", True)])
def test_pingpong_kernel_compiles_for_hopper(act, residual, tmp_path):
    """The generated Gluon source through Triton's whole compiler for sm_90 (no GPU needed: the
    GPU tests run it); edges in M, N and K, the output stored through pointers (its rows are not
    16-byte multiples, so no TMA store); exact GELU, and SiLU (the sigmoid helper) with a
    residual (a constant tile in the accumulator's layout). In a process of its own: the CPU
    interpreter, once it has run a kernel here, leaves Triton's language patched for itself."""
    pytest.importorskip("triton.experimental.gluon._runtime")
    graph, kernels = linear(Builder(), 4000, 520, 4100, act, dtype="bfloat16", residual=residual)
    kern = _pingpong(compile_plan(graph, kernels))
    assert "c_desc = a_desc  # unused: no output leaves through TMA" in kern.source
    (tmp_path / "pingpong.py").write_text(kern.source)
    config = kern.configs[0]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _COMPILE_FOR_HOPPER, str(tmp_path / "pingpong.py"), kern.name,
                           json.dumps(dict(config.constants)), json.dumps(list(kern.args)), str(config.num_warps)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metadata = json.loads(done.stdout.splitlines()[-1])
    assert metadata["num_warps"] == 12  # two consumer warpgroups and the producer's (padded) group
    assert metadata["shared"] <= 232448  # what a Hopper block may have


# argv: source file, kernel name, constants (JSON), pointer arguments (JSON), num_warps
_COMPILE_FOR_HOPPER = """
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import _runtime as gluon_runtime
path, name, constants, pointers, num_warps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), set(json.loads(sys.argv[4])), int(sys.argv[5])
spec = importlib.util.spec_from_file_location("pipec_test_pingpong", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
fn = getattr(module, name)
signature = {a: "constexpr" if a in constants else "*bf16" if a in pointers else "i32" for a in fn.arg_names}
attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a in pointers}
source = gluon_runtime.GluonASTSource(fn, signature, constants, attrs=attrs)
compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "maxnreg": constants["MAXNREG"]})
print(json.dumps({"num_warps": compiled.metadata.num_warps, "shared": compiled.metadata.shared}))
"""


def test_pingpong_stores_an_fp32_output_through_pointers():
    """Only a 16-bit output tile leaves through the kernel's shared memory (an fp32 one would
    not fit beside the ring): a bf16 Linear + GELU cast to fp32 stores with pointers."""
    b = Builder()
    graph, kernels = linear(b, 4096, 512, 4096, "gelu", dtype="bfloat16")
    b.node("wide", "cast", ["act"], (4096, 4096), "float32")
    nodes = (*kernels[1].nodes, "wide")
    kernels[1] = dataclasses.replace(kernels[1], nodes=nodes, outputs=("wide",))
    kern = _pingpong(compile_plan(b.graph(["wide"]), kernels))
    assert "c_desc = a_desc  # unused: no output leaves through TMA" in kern.source
    assert "gl.store(out_ptr0" in kern.source


@pytest.mark.parametrize("dims,dtype,target", [
    ((8192, 768, 50257), "bfloat16", "pipec.mm_padded.default"),  # GPT-2's LM head, backward
    ((50257, 8192, 768), "float16", "pipec.mm_padded.default"),
    ((8192, 768, 768), "bfloat16", "aten.mm.default"),  # aligned
    ((8192, 768, 50257), "float32", "aten.mm.default"),  # no 16-byte rule for fp32 here
])
def test_misaligned_half_products_call_the_padded_mm(builder, dims, dtype, target):
    from pipec_codegen_triton.matmul_choice import library_target

    m, n, k = dims
    a, b = builder.input("a", (m, k), dtype), builder.input("b", (k, n), dtype)
    builder.node("p", "mm", [a, b], (m, n), dtype)
    g = builder.graph(["p"])
    assert library_target(g.node_map()["p"], g.types()) == target


@pytest.mark.parametrize("dims, template", [
    ((4096, 768, 50257), True),   # GPT-2's LM head: N unaligned, so cuBLAS's result is copied back
    ((4096, 30522, 768), True),   # BERT's LM head backward (grad @ W): K unaligned, the gradient padded
    ((4096, 768, 768), False),    # aligned: cuBLAS as it is
])
def test_plain_products_cublas_takes_padded_get_the_template_beside_it(builder, dims, template):
    """A product without an epilogue whose library call is `pipec.mm_padded` is a choice group:
    the Triton template (the default: it reads and writes unaligned rows in place) and the padded
    cuBLAS call; an aligned one stays one library call."""
    m, k, n = dims
    a, b = builder.input("a", (m, k), "bfloat16"), builder.input("b", (k, n), "bfloat16")
    builder.node("p", "mm", [a, b], (m, n), "bfloat16")
    program = compile_plan(builder.graph(["p"]), [kernel("mm_0", "matmul", ["p"], [a, b], ["p"], (m, n))])
    alternatives = {get_attr(s.attrs, "alternative"): s for s in program.steps if get_attr(s.attrs, "choice")}
    if not template:
        assert not alternatives and [s.target for s in program.steps] == ["aten.mm.default"]
        return
    assert get_attr(alternatives["template"].attrs, "default") and alternatives["template"].kind == "launch"
    assert alternatives["library"].target == "pipec.mm_padded.default"
