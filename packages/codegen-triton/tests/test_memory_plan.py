"""The memory plan: liveness slots, in-place reuse, peak bytes never above eager's."""

import sympy
from pipec_codegen_triton.memory_plan import inplace_candidates, peak_bytes, plan_memory, plan_program_memory
from pipec_ir import KernelPlan, Step, TensorType, get_attr, make_attrs
from pipec_ir.verify import verify_program

from conftest import Builder, kernel


def T(*shape, dtype="float32"):
    return TensorType(tuple(sympy.Integer(s) for s in shape), dtype)


def launch(name, inputs, outputs):
    return Step("launch", name, tuple(inputs), tuple(outputs))


def chain_plan():
    """x -> relu -> exp -> neg (three pointwise kernels) -> n."""
    b = Builder()
    x = b.input("x", (4, 8))
    b.node("r", "relu", [x], (4, 8))
    b.node("e", "exp", ["r"], (4, 8))
    b.node("n", "neg", ["e"], (4, 8))
    g = b.graph(["n"])
    return KernelPlan(g, "test", (
        kernel("k_relu", "pointwise", ["r"], ["x"], ["r"], (4, 8)),
        kernel("k_exp", "pointwise", ["e"], ["r"], ["e"], (4, 8)),
        kernel("k_neg", "pointwise", ["n"], ["e"], ["n"], (4, 8)),
    ), (), ())


def test_buffers_with_disjoint_lifetimes_share_a_slot():
    steps = (launch("a", ["x"], ["t1"]), launch("b", ["t1"], ["t2"]), launch("c", ["t2"], ["t3"]),
             launch("d", ["t3"], ["out"]))
    types = {n: T(4, 8) for n in ("x", "t1", "t2", "t3", "out")}
    buffers, slots, pairs = plan_memory(steps, types, {"out"})
    slot = {b.name: b.slot for b in buffers}
    assert slot["t1"] == slot["t3"] != slot["t2"]  # t1 is free again when t3 is written
    assert slot["out"] is None and len(slots) == 2 and pairs == {}


def test_pointwise_output_takes_the_slot_of_an_input_dying_there():
    plan = chain_plan()
    steps = tuple(launch(k.name, k.inputs, k.outputs) for k in plan.kernels)
    types = plan.graph.types()
    assert inplace_candidates(plan) == {"k_relu": frozenset({"x"}), "k_exp": frozenset({"r"}),
                                        "k_neg": frozenset({"e"})}  # x is a graph input: never a donor
    new_steps, buffers, slots, peak = plan_program_memory(steps, types, {"n"}, plan)
    slot = {b.name: b.slot for b in buffers}
    assert slot["r"] == slot["e"] == 0 and len(slots) == 1
    assert get_attr(new_steps[1].attrs, "inplace") == (("e", "r"),)
    assert get_attr(new_steps[0].attrs, "inplace") is None
    eager = peak_bytes(steps, types, {"n"})
    assert int(peak) == int(eager) == 2 * 128  # planned: the shared slot and n; eager: e and n


def test_no_in_place_through_a_view_or_a_broadcast():
    b = Builder()
    x = b.input("x", (8, 8))
    b.node("r", "relu", [x], (8, 8))
    b.node("rt", "permute", ["r"], (8, 8), dims=(1, 0))
    b.node("s", "add", ["rt", "r"], (8, 8))
    g = b.graph(["s"])
    plan = KernelPlan(g, "test", (
        kernel("k_relu", "pointwise", ["r"], ["x"], ["r"], (8, 8)),
        kernel("k_add", "pointwise", ["rt", "s"], ["r"], ["s"], (8, 8)),
    ), (), ())
    assert "k_add" not in inplace_candidates(plan)  # r is read transposed: element i is not read at i


def test_in_place_needs_the_same_type_and_a_dying_input():
    steps = (launch("a", ["x"], ["t1"]), launch("b", ["t1"], ["t2"]), launch("c", ["t1", "t2"], ["out"]))
    types = {"x": T(4, 8), "t1": T(4, 8), "t2": T(4, 8), "out": T(4, 8)}
    _, _, pairs = plan_memory(steps, types, {"out"}, inplace={"b": frozenset({"t1"})})
    assert pairs == {}  # t1 is still read by c
    types["t2"] = T(4, 8, dtype="float16")
    steps = (launch("a", ["x"], ["t1"]), launch("b", ["t1"], ["t2"]), launch("c", ["t2"], ["out"]))
    _, _, pairs = plan_memory(steps, types, {"out"}, inplace={"b": frozenset({"t1"})})
    assert pairs == {}  # another size class


def test_a_plan_above_eager_falls_back_to_one_slot_per_buffer():
    # small takes big's freed slot (best fit): a slot kept across a gap must never cost more
    # than eager at any step, else the plan is one slot per buffer
    steps = (launch("a", ["x"], ["big"]), launch("b", ["big"], ["small"]),
             Step("extern", "aten.mm.default", ("small", "w"), ("mm",), make_attrs()),
             launch("c", ["mm", "small"], ["out"]))
    types = {"x": T(32, 32), "big": T(32, 32), "small": T(4, 4), "w": T(4, 4), "mm": T(4, 4), "out": T(4, 4)}
    _, buffers, slots, peak = plan_program_memory(steps, types, {"out"})
    assert int(peak) <= int(peak_bytes(steps, types, {"out"}))


def test_generated_program_with_in_place_steps_verifies_and_runs():
    from conftest import run_program
    from pipec_codegen_triton import generate_program
    from pipec_ir import CompileOptions
    import torch

    prog = generate_program(chain_plan(), CompileOptions())
    verify_program(prog)
    assert any(get_attr(s.attrs, "inplace") for s in prog.steps)
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    (out,) = run_program(prog, [x])
    torch.testing.assert_close(out.cpu(), -torch.exp(torch.relu(x)))


def _epilogue_steps(also_read_later=False, other_alternative=False, dtype="float32"):
    """cuBLAS's product p (an extern), then a pointwise kernel writing o over it (codegen's proposal)."""
    lib = make_attrs(choice="g", alternative="library")
    ep = make_attrs(choice="g", alternative="library_mm" if other_alternative else "library",
                    inplace=(("o", "p"),))
    steps = [Step("extern", "aten.mm.default", ("a", "w"), ("p",), lib),
             Step("launch", "epilogue", ("p",), ("o",), ep),
             launch("next", ["o"] + (["p"] if also_read_later else []), ["out"])]
    types = {"a": T(16, 8), "w": T(8, 16), "p": T(16, 16), "o": T(16, 16, dtype=dtype), "out": T(16)}
    return tuple(steps), types


def test_epilogue_writes_over_the_library_result_where_it_dies():
    """An activation, not two: the epilogue's output is cuBLAS's storage (no slot of its own)."""
    steps, types = _epilogue_steps()
    new_steps, buffers, slots, peak = plan_program_memory(steps, types, {"out"})
    assert get_attr(new_steps[1].attrs, "inplace") == (("o", "p"),)
    assert {b.name: b.slot for b in buffers}["o"] is None
    assert int(peak) == 16 * 16 * 4 + 64  # p (then o in it), and out
    assert int(peak_bytes(steps, types, {"out"})) == 2 * 16 * 16 * 4  # eager: p and o at once


def test_epilogue_proposal_dropped_where_it_is_not_safe():
    for kwargs in ({"also_read_later": True}, {"other_alternative": True}, {"dtype": "float16"}):
        steps, types = _epilogue_steps(**kwargs)
        new_steps, buffers, _, _ = plan_program_memory(steps, types, {"out"})
        assert get_attr(new_steps[1].attrs, "inplace") is None, kwargs


def test_library_epilogue_proposes_writing_over_its_product():
    """codegen's library alternative of mm + bias + GELU: the epilogue kernel's step proposes its
    output over the addmm result, through the reshape a Linear on [B, T, K] puts between them."""
    from pipec_codegen_triton.matmul_choice import library_alternatives
    from pipec_ir import CompileOptions, Kernel

    b = Builder()
    x = b.input("x", (16, 8))
    w = b.input("w", (8, 32))
    bias = b.input("bias", (32,))
    b.node("p", "mm", [x, w], (16, 32))
    b.node("b2", "reshape", [bias], (1, 32))
    b.node("be", "expand", ["b2"], (16, 32))
    b.node("s", "add", ["p", "be"], (16, 32))
    b.node("r", "reshape", ["s"], (2, 8, 32))
    b.node("g", "gelu", ["r"], (2, 8, 32), approximate="none")
    g = b.graph(["g"])
    k = Kernel("k", "matmul", ("p", "b2", "be", "s", "r", "g"), ("g",), ("x", "w", "bias"),
               g.node_map()["p"].type.shape)
    alts = library_alternatives(g, k, CompileOptions())
    steps = alts["library"][1]
    assert steps[0].target == "aten.addmm.default" and steps[0].outputs == ("s",)
    assert get_attr(steps[1].attrs, "inplace") == (("g", "s"),)
    assert get_attr(alts["library_mm"][1][1].attrs, "inplace") == (("g", "p"),)


def test_a_matmul_argument_dies_at_the_call():
    """cuBLAS's result is fresh memory: its argument `a` need not live as long as the result
    (an unknown library call may return a view of an argument: its arguments stay live)."""
    def plan(target):
        steps = (launch("k1", ["x"], ["a"]), Step("extern", target, ("a", "w"), ("m",), make_attrs()),
                 launch("k2", ["m"], ["b"]), launch("k3", ["b", "m"], ["out"]))
        types = {"x": T(8, 8), "a": T(8, 8), "w": T(8, 8), "m": T(8, 8), "b": T(8, 8), "out": T(8, 8)}
        buffers, _, _ = plan_memory(steps, types, {"out"})
        return {b.name: b.slot for b in buffers}

    slot = plan("aten.mm.default")
    assert slot["b"] == slot["a"]
    slot = plan("aten.some_unknown_op.default")
    assert slot["b"] != slot["a"]
