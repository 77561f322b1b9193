"""Combo kernels: consecutive independent pointwise launches as one launch (combo_kernels.py)."""

import pytest
import torch
from pipec_codegen_triton import generate_program
from pipec_codegen_triton.combo_kernels import COMBO_BLOCK, COMBO_MAX_NUMEL
from pipec_ir import CompileOptions, KernelPlan, dumps, loads
from pipec_ir.verify import verify_program

from conftest import Builder, kernel, run_program

OFF = CompileOptions().with_extra(combo_kernels=False)


def compile_plan(graph, kernels, options=None):
    program = generate_program(KernelPlan(graph, "test", tuple(kernels)), options or CompileOptions())
    assert loads(dumps(program)) == program
    verify_program(program)
    return program


def launches(program):
    return [s.target for s in program.steps if s.kind == "launch"]


def independent_updates(shapes):
    """One pointwise kernel per input: out_k = x_k * 2 + 1, over each of `shapes`."""
    b = Builder()
    kernels, outputs = [], []
    for k, shape in enumerate(shapes):
        x = b.input(f"x{k}", shape)
        b.node(f"s{k}", "sigmoid", [x], shape)
        b.node(f"o{k}", "mul", [f"s{k}", x], shape)
        kernels.append(kernel(f"k{k}", "pointwise", [f"s{k}", f"o{k}"], [x], [f"o{k}"], shape))
        outputs.append(f"o{k}")
    return b.graph(outputs), kernels


def test_independent_launches_of_different_shapes_are_one_launch():
    """Three kernels of 1500, 7 and 40 x 75 elements: one launch whose program ranges run each
    body over its own elements (none a multiple of the block: the last block of each is masked)."""
    shapes = [(1500,), (7,), (40, 75)]
    graph, kernels = independent_updates(shapes)
    program = compile_plan(graph, kernels)
    assert launches(program) == ["pipec_combo_0"], program.steps
    combo = program.kernels[-1]
    blocks = sum(-(-n // COMBO_BLOCK) for n in (1500, 7, 3000))
    assert int(combo.grid[0][0]) == blocks * COMBO_BLOCK
    torch.manual_seed(0)
    xs = [torch.randn(*s) for s in shapes]
    for got, x in zip(run_program(program, xs), xs):
        torch.testing.assert_close(got, torch.sigmoid(x) * x)
    assert launches(compile_plan(graph, kernels, OFF)) == ["k0", "k1", "k2"]


def test_same_bodies_share_one_function():
    graph, kernels = independent_updates([(64,), (64,), (64,), (32,)])
    program = compile_plan(graph, kernels)
    source = program.kernels[-1].source
    assert source.count("def pipec_combo_0_part") == 2, source  # the three 64-element bodies are one
    xs = [torch.randn(n) for n in (64, 64, 64, 32)]
    for got, x in zip(run_program(program, xs), xs):
        torch.testing.assert_close(got, torch.sigmoid(x) * x)


def test_a_launch_reading_what_another_writes_is_not_joined():
    b = Builder()
    x, y = b.input("x", (30,)), b.input("y", (20,))
    b.node("a", "exp", [x], (30,))
    b.node("c", "neg", [y], (20,))
    b.node("d", "relu", ["a"], (30,))
    program = compile_plan(b.graph(["c", "d"]), [
        kernel("k_a", "pointwise", ["a"], [x], ["a"], (30,)),
        kernel("k_c", "pointwise", ["c"], [y], ["c"], (20,)),
        kernel("k_d", "pointwise", ["d"], ["a"], ["d"], (30,)),  # reads k_a's value
    ])
    assert launches(program) == ["pipec_combo_0", "k_d"]
    xv, yv = torch.randn(30), torch.randn(20)
    c, d = run_program(program, [xv, yv])
    torch.testing.assert_close(c, -yv)
    torch.testing.assert_close(d, torch.relu(torch.exp(xv)))


def test_a_launch_writing_the_memory_another_reads_is_not_joined():
    """k_n's value takes the memory-plan slot of r, which k_e reads: the two touch no common value,
    yet launched together k_n could overwrite r before k_e has read it."""
    b = Builder()
    x, y = b.input("x", (64,)), b.input("y", (64,))
    b.node("r", "relu", [x], (64,))
    b.node("e", "exp", ["r"], (64,))
    b.node("n", "neg", [y], (64,))
    b.node("t", "sum", ["n"], (), dims=(0,), keepdim=False)
    program = compile_plan(b.graph(["e", "t"]), [
        kernel("k_r", "pointwise", ["r"], [x], ["r"], (64,)),
        kernel("k_e", "pointwise", ["e"], ["r"], ["e"], (64,)),
        kernel("k_n", "pointwise", ["n"], [y], ["n"], (64,)),
        kernel("k_t", "reduction", ["t"], ["n"], ["t"], (64,), (0,)),
    ])
    slots = {buf.name: buf.slot for buf in program.buffers}
    assert slots["n"] is not None and slots["n"] == slots["r"], slots  # the reuse the test is about
    assert launches(program) == ["k_r", "k_e", "k_n", "k_t"]
    xv, yv = torch.randn(64), torch.randn(64)
    e, t = run_program(program, [xv, yv])
    torch.testing.assert_close(e, torch.exp(torch.relu(xv)))
    torch.testing.assert_close(t, (-yv).sum())


def test_large_and_symbolic_launches_keep_their_own():
    big = COMBO_MAX_NUMEL + 1
    graph, kernels = independent_updates([(big,), (8,)])
    program = generate_program(KernelPlan(graph, "test", tuple(kernels)), CompileOptions())
    assert launches(program) == ["k0", "k1"]


def test_combo_kernels_must_be_a_flag():
    graph, kernels = independent_updates([(8,), (8,)])
    with pytest.raises(Exception, match="combo_kernels must be True or False"):
        compile_plan(graph, kernels, CompileOptions().with_extra(combo_kernels="yes"))


def test_a_bounds_checked_combo_is_a_debug_kernel():
    """Members' bounds assertions are compiled only in a kernel built with Triton's debug flag."""
    graph, kernels = independent_updates([(40,), (9,)])
    program = compile_plan(graph, kernels, CompileOptions().with_extra(bounds_check=True))
    (combo,) = [k for k in program.kernels if k.name == "pipec_combo_0"]
    assert "@triton.jit(debug=True)\ndef pipec_combo_0(" in combo.source, combo.source
    assert "device_assert" in combo.source
    xs = [torch.randn(40), torch.randn(9)]
    for got, x in zip(run_program(program, xs), xs):
        torch.testing.assert_close(got, torch.sigmoid(x) * x)


def test_a_launch_writing_over_an_input_another_reads_is_not_joined():
    """k_b's value takes, in place, the slot of r, which dies there; k_a reads r too. Launched
    together, k_b could overwrite r before k_a has read it."""
    b = Builder()
    x = b.input("x", (64,))
    b.node("r", "relu", [x], (64,))
    b.node("a", "exp", ["r"], (64,))
    b.node("nb", "neg", ["r"], (64,))
    b.node("t", "sum", ["nb"], (), dims=(0,), keepdim=False)
    program = compile_plan(b.graph(["a", "t"]), [
        kernel("k_r", "pointwise", ["r"], [x], ["r"], (64,)),
        kernel("k_a", "pointwise", ["a"], ["r"], ["a"], (64,)),
        kernel("k_b", "pointwise", ["nb"], ["r"], ["nb"], (64,)),
        kernel("k_t", "reduction", ["t"], ["nb"], ["t"], (64,), (0,)),
    ])
    inplace = {s.target: dict(dict(s.attrs).get("inplace", ())) for s in program.steps if s.kind == "launch"}
    assert inplace["k_b"] == {"nb": "r"}, inplace  # the reuse the test is about
    assert launches(program) == ["k_r", "k_a", "k_b", "k_t"]
    xv = torch.randn(64)
    a, t = run_program(program, [xv])
    torch.testing.assert_close(a, torch.exp(torch.relu(xv)))
    torch.testing.assert_close(t, (-torch.relu(xv)).sum())
