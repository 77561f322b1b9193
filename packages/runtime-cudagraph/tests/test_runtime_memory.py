"""plan_check: buffers sharing a slot must have disjoint lifetimes."""

from __future__ import annotations

import pytest
import sympy

from pipec_ir import Buffer, CompileOptions, LoadContext, Program, Ref, Slot, Step, make_attrs
from runtime_helpers import T, add_kernel, slot_program

from pipec_runtime_cudagraph import MemoryPlanError, plan_check
from pipec_runtime_cudagraph.memory import lifetimes


def test_valid_plan_passes():
    plan_check(slot_program())


def _two_adds(slot_a, slot_b, outputs=("b",), extra_steps=(), slots=None):
    k = add_kernel("k", 8)
    return Program(
        name="p", inputs=(Buffer("x", T([8])),), outputs=outputs,
        buffers=(Buffer("a", T([8]), slot=slot_a), Buffer("b", T([8]), slot=slot_b),
                 Buffer("v", T([2, 4]))),
        kernels=(k,),
        steps=(Step("launch", "k", ("x", "x"), ("a",)), *extra_steps,
               Step("launch", "k", ("a", "x"), ("b",))),
        slots=slots if slots is not None else (Slot(0, sympy.Integer(32)), Slot(1, sympy.Integer(32))),
    )


def test_same_step_reuse_is_a_conflict():
    with pytest.raises(MemoryPlanError, match=r"slot 0: a .* and b .* live at the same time"):
        plan_check(_two_adds(0, 0))


def test_output_lives_to_the_end():
    prog = _two_adds(0, 1, outputs=("b", "a"))
    assert lifetimes(prog)["a"] == (0, 2)


def test_view_keeps_its_source_alive():
    view = Step("extern", "aten.reshape.default", ("a",), ("v",), make_attrs(args=(Ref("a"), (2, 4))))
    prog = _two_adds(0, 1, outputs=("b", "v"), extra_steps=(view,))
    assert lifetimes(prog)["a"][1] == 3


def test_slot_too_small_and_missing_slot():
    with pytest.raises(MemoryPlanError, match="needs 32 bytes but slot 0 has 16"):
        plan_check(_two_adds(0, 1, slots=(Slot(0, sympy.Integer(16)), Slot(1, sympy.Integer(32)))))
    with pytest.raises(MemoryPlanError, match="slot 5, which is not declared"):
        plan_check(_two_adds(5, 1))


def test_runtime_refuses_a_bad_plan(tmp_path):
    from pipec_ir import CompileOptions

    from pipec_runtime_cudagraph import load_launch

    with pytest.raises(MemoryPlanError):
        load_launch(_two_adds(0, 0), CompileOptions(), LoadContext(kernel_dir=str(tmp_path)))


def test_declared_in_place_reuse_passes_and_runs(tmp_path):
    import torch

    from pipec_ir import CompileOptions

    from pipec_runtime_cudagraph import load_launch

    prog = _two_adds(0, 0)
    steps = (prog.steps[0], Step("launch", "k", ("a", "x"), ("b",), make_attrs(inplace=(("b", "a"),))))
    prog = Program(name=prog.name, inputs=prog.inputs, outputs=("b",), buffers=prog.buffers,
                   kernels=prog.kernels, steps=steps, slots=prog.slots)
    plan_check(prog)  # b overwrites a in the step where a dies: declared, so allowed
    wrong = Program(name=prog.name, inputs=prog.inputs, outputs=("b",), buffers=prog.buffers,
                    kernels=prog.kernels, steps=(steps[0], Step("launch", "k", ("a", "x"), ("b",),
                                                                make_attrs(inplace=(("b", "x"),)))),
                    slots=prog.slots)
    with pytest.raises(MemoryPlanError, match="live at the same time"):
        plan_check(wrong)  # the pair must name the buffer that dies there
    run = load_launch(prog, CompileOptions(), LoadContext(kernel_dir=str(tmp_path)))
    x = torch.arange(8, dtype=torch.float32)
    for _ in range(2):  # general path, then the specialized one
        torch.testing.assert_close(run([x])[0], 3 * x)


def test_general_path_allocates_each_slot_where_it_is_first_written(tmp_path):
    """Not every slot up front: slot 1 (t2) is allocated right before the row sum writes it,
    slot 0 (t1, later t3) before the first add. Results are unchanged."""
    import torch

    from pipec_runtime_cudagraph import load_launch

    run = load_launch(slot_program(), CompileOptions().with_extra(specialize=False),
                      LoadContext(kernel_dir=str(tmp_path)))
    steps = run.steps_for(torch.device("cpu"))
    schedule = run._allocation_schedule(steps)
    where = {i: k
             for k, actions in enumerate(schedule) for _, views in actions for i, *_ in views}
    index = run.index
    assert where[index["t1"]] == 0 and where[index["t3"]] == 0 and where[index["t2"]] == 1
    x = torch.randn(8, 37)
    t3, t2 = run([x])
    torch.testing.assert_close(t2, (x + x).sum(1))
    torch.testing.assert_close(t3, 2 * (x + x).sum(1))


def test_specialized_run_shares_a_slot_only_while_one_of_its_buffers_lives(tmp_path):
    """slot_program's slot 0 holds t1, dead after the row sum, then t3: the specialized run
    frees t1's storage and gives t3 its own (holding it across the gap keeps memory eager has
    freed). An in-place kernel's output keeps its dying input's storage."""
    import torch

    from pipec_runtime_cudagraph import load_launch

    run = load_launch(slot_program(), CompileOptions(), LoadContext(kernel_dir=str(tmp_path)))
    # on a CUDA machine CPU tensors take the unspecialized CPU-on-GPU path: use the GPU there
    x = torch.randn(8, 37, device="cuda" if torch.cuda.is_available() else "cpu")
    for _ in range(2):  # general path, then the specialized one
        t3, t2 = run([x])
        torch.testing.assert_close(t3, 2 * (x + x).sum(1))
    [(_, specialized)] = run.specialized.values()
    storages = [ln.split("=")[0].strip() for ln in specialized.source.splitlines() if "EMPTY" in ln]
    assert sorted(storages) == ["slot0", "slot0_1", "slot1"]

    prog = _two_adds(0, 0)
    steps = (prog.steps[0], Step("launch", "k", ("a", "x"), ("b",), make_attrs(inplace=(("b", "a"),))))
    in_place = Program(name=prog.name, inputs=prog.inputs, outputs=("b",), buffers=prog.buffers,
                       kernels=prog.kernels, steps=steps, slots=prog.slots)
    run = load_launch(in_place, CompileOptions(), LoadContext(kernel_dir=str(tmp_path)))
    a = torch.arange(8.0, device=x.device)
    for _ in range(2):
        torch.testing.assert_close(run([a])[0], 3 * a)
    [(_, specialized)] = run.specialized.values()
    assert sum("EMPTY" in ln for ln in specialized.source.splitlines()) == 1


def _add_chain(n: int, big=None):
    """x -> b0 = x + x -> b1 = b0 + x -> ... each buffer in a slot of its own (as a plan whose
    slots serve other sizes too would have them). `big`: after step `big`, a 64-element buffer
    is written from x64 and read once into the output `s`: the run's peak is there."""
    k, names = add_kernel("k", 8), [f"b{i}" for i in range(n)]
    steps = [Step("launch", "k", ("x", "x"), ("b0",))]
    steps += [Step("launch", "k", (names[i - 1], "x"), (names[i],)) for i in range(1, n)]
    buffers = [Buffer(b, T([8]), slot=i) for i, b in enumerate(names)]
    kernels = [k]
    if big is not None:
        kernels.append(add_kernel("k64", 64))
        buffers += [Buffer("big", T([64])), Buffer("s", T([8]))]
        steps[big + 1:big + 1] = [Step("launch", "k64", ("x64", "x64"), ("big",)),
                                  Step("launch", "k", ("big", "x"), ("s",))]
    inputs = (Buffer("x", T([8])),) + ((Buffer("x64", T([64])),) if big is not None else ())
    return Program(name="chain", inputs=inputs, outputs=(names[-1], *(("s",) if big is not None else ())),
                   buffers=tuple(buffers), kernels=tuple(kernels), steps=tuple(steps),
                   slots=tuple(Slot(i, sympy.Integer(32)) for i in range(n)))


def _specialized_source(prog, tmp_path):
    """(the specialized run's source, its outputs, x) after two calls on x = 0..7 (other inputs ones)."""
    import torch

    from pipec_runtime_cudagraph import load_launch

    run = load_launch(prog, CompileOptions(), LoadContext(kernel_dir=str(tmp_path)))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.arange(8.0, device=device)
    extra = [torch.ones(tuple(int(d) for d in b.type.shape), device=device) for b in prog.inputs[1:]]
    for _ in range(2):  # general path, then the specialized one
        out = run([x, *extra])
    [(_, specialized)] = run.specialized.values()
    return specialized.source, out, x


def test_specialized_run_hands_a_released_storage_to_the_next_buffer_of_its_layout(tmp_path):
    """b0 dies when b1 is written, b1 when b2 is: b2 takes b0's storage, b3 b1's (held in between,
    the memory in use never passes the peak of two buffers), so a chain of four allocates two."""
    source, (b3,), x = _specialized_source(_add_chain(4), tmp_path)
    assert sum("EMPTY" in ln for ln in source.splitlines()) == 2
    assert "slot2 =" not in source and "slot3 =" not in source  # their buffers bind the held storage
    import torch
    torch.testing.assert_close(b3, 5 * x)


def test_a_live_view_keeps_its_storage_from_being_handed_on(tmp_path):
    """A view of b0 read after b2 is written: b0's storage is still in use there, so b2 gets
    fresh storage (handing it on would let b2 overwrite what the view reads)."""
    view = Step("extern", "aten.reshape.default", ("b0",), ("v",), make_attrs(args=(Ref("b0"), (2, 4))))
    read = Step("launch", "k", ("v_flat", "x"), ("late",))
    flat = Step("extern", "aten.reshape.default", ("v",), ("v_flat",), make_attrs(args=(Ref("v"), (8,))))
    prog = _add_chain(3)
    prog = Program(name=prog.name, inputs=prog.inputs, outputs=("b2", "late"),
                   buffers=(*prog.buffers, Buffer("v", T([2, 4])), Buffer("v_flat", T([8])), Buffer("late", T([8]))),
                   kernels=prog.kernels, steps=(prog.steps[0], view, *prog.steps[1:], flat, read), slots=prog.slots)
    source, (b2, late), x = _specialized_source(prog, tmp_path)
    import torch
    torch.testing.assert_close(b2, 4 * x)
    torch.testing.assert_close(late, 3 * x)  # b0 = 2x, read through the view after b2 is written
    assert "slot2 =" in source  # b2 allocated its own


def test_storage_is_not_held_across_the_peak(tmp_path):
    """A 64-element buffer written between b0's release and b2's first write makes the run's
    peak: holding b0 across it would raise the peak, so b2 allocates; b3 still takes b1's storage."""
    source, (b3, s), x = _specialized_source(_add_chain(4, big=1), tmp_path)
    lines = source.splitlines()
    assert any(ln.strip().startswith("slot2 = EMPTY") for ln in lines)
    assert not any(ln.strip().startswith("slot3 = EMPTY") for ln in lines)
    import torch
    torch.testing.assert_close(b3, 5 * x)
    torch.testing.assert_close(s, 2 + x)


# ---------------------------------------------------------------- memory_profile: what a call holds


def test_profile_counts_each_value_from_its_write_to_its_last_reader():
    from pipec_runtime_cudagraph.memory import memory_profile, peak_report
    from runtime_helpers import extern_program

    prog = slot_program(rows=8, cols=37)  # t1 [8, 37], then t2 [8] and t3 [8] (returned)
    big, small = 8 * 37 * 4, 8 * 4
    bound = memory_profile(prog)
    assert bound.per_step == (big, big + small, 2 * small)  # t1 freed after the row sum
    assert bound.peak == big + small and bound.step == 1
    assert dict(bound.live) == {"t1": big, "t2": small}
    # with slots, slot 0 (t1, then t3) is held from t1's write to t3's end: the general path
    planned = memory_profile(prog, slots=True)
    assert planned.per_step == (big, big + small, big + small)
    # a library result counts from its call; a view of an input is free; inputs are at rest
    ext = memory_profile(extern_program(m=6, k=5, n=7))
    assert ext.per_step == (0, 6 * 7 * 4, 2 * 6 * 7 * 4, 6 * 7 * 4)
    report = peak_report(prog)
    assert report["default"] == {"planned": big + small, "bound": big + small, "step": "pipec_sum_rows",
                                 "live": [["slot 0", big], ["slot 1", small]]}
    assert report["worst"] == big + small


def test_profile_runs_one_alternative_of_each_choice_group():
    """Alternatives are exclusive: a call holds the values of the one it runs, never of both."""
    from pipec_runtime_cudagraph.memory import alternatives, memory_profile, peak_report, run_steps

    k = add_kernel("k", 8)
    big = T([64])

    def tagged(step, alt, default=False):
        attrs = dict(step.attrs)
        attrs.update(choice="g", alternative=alt, **({"default": True} if default else {}))
        return Step(step.kind, step.target, step.inputs, step.outputs, make_attrs(**attrs))

    prog = Program(
        name="choice", inputs=(Buffer("x", T([8])),), outputs=("y",),
        buffers=(Buffer("y", T([8])), Buffer("lib", big)),
        kernels=(k,),
        steps=(tagged(Step("launch", "k", ("x", "x"), ("y",)), "template", default=True),
               tagged(Step("extern", "aten.mul.Tensor", ("x",), ("lib",), make_attrs(args=(Ref("x"), 2))), "library"),
               tagged(Step("launch", "k", ("lib", "x"), ("y",)), "library")),
    )
    assert alternatives(prog) == ("template", "library")
    assert run_steps(prog) == [0] and run_steps(prog, "library") == [1, 2] and run_steps(prog, "other") == [0]
    assert memory_profile(prog).peak == 32
    assert memory_profile(prog, alternative="library").peak == 64 * 4 + 32
    assert peak_report(prog)["worst"] == 64 * 4 + 32


def test_profile_in_place_output_shares_its_input_storage():
    from pipec_runtime_cudagraph.memory import memory_profile

    prog = _two_adds(0, 0)
    steps = (prog.steps[0], Step("launch", "k", ("a", "x"), ("b",), make_attrs(inplace=(("b", "a"),))))
    prog = Program(name=prog.name, inputs=prog.inputs, outputs=("b",), buffers=prog.buffers,
                   kernels=prog.kernels, steps=steps, slots=prog.slots)
    assert memory_profile(prog).per_step == (32, 32)
    assert memory_profile(prog, slots=True).per_step == (32, 32)


def test_launch_writes_over_a_library_result(tmp_path):
    """`inplace` naming a library result (no slot): the output is that result's storage, bound
    right before the launch; nothing is allocated for it, on the general path or a specialized run."""
    import torch

    from pipec_runtime_cudagraph import load_launch
    from pipec_runtime_cudagraph.launch import written_over
    from pipec_runtime_cudagraph.memory import memory_profile
    from runtime_helpers import extern_program

    base = extern_program(m=6, k=5, n=7)
    steps = list(base.steps)
    steps[2] = Step("launch", "pipec_add_mm", ("mm", "b"), ("out",), make_attrs(inplace=(("out", "mm"),)))
    prog = Program(name=base.name, inputs=base.inputs, outputs=base.outputs, buffers=base.buffers,
                   kernels=base.kernels, steps=tuple(steps))
    plan_check(prog)
    assert memory_profile(prog).per_step == (0, 6 * 7 * 4, 6 * 7 * 4, 6 * 7 * 4)  # base: twice that at step 2
    run = load_launch(prog, CompileOptions(), LoadContext(kernel_dir=str(tmp_path)))
    assert run.index["out"] not in run.allocated
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, w, b = (torch.randn(6, 5, device=device), torch.randn(7, 5, device=device), torch.randn(6, 7, device=device))
    for _ in range(2):  # general path, then the specialized one
        out, xt, _, out2 = run([x, w, b])
        torch.testing.assert_close(out, x @ w.t() + b)
        assert out2 is out and xt.data_ptr() == x.data_ptr()
    [(_, specialized)] = run.specialized.values()
    assert "WRITTEN_OVER" in specialized.source and "EMPTY" not in specialized.source
    # a result of another layout than the Program says gets a fresh output (values still right)
    odd = torch.randn(7, 6).t()
    fresh = written_over(odd, (6, 7), torch.float32)
    assert fresh.data_ptr() != odd.data_ptr() and fresh.shape == (6, 7)
    assert written_over(odd.contiguous(), (42,), torch.float32).shape == (42,)
