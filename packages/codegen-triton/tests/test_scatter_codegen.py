"""Scatter kernels (docs/IR.md, `scatter`): an init launch, then a store or atomic launch."""

import pytest
import torch
from pipec_codegen_triton import generate_program
from pipec_ir import CompileOptions, KernelPlan, dumps, loads
from pipec_ir.verify import verify_program

from conftest import kernel, run_program

REDUCE = {"none": None, "sum": "sum", "amax": "amax", "amin": "amin"}
CALL = {"none": "tl.store(", "sum": "tl.atomic_add(", "amax": "tl.atomic_max(", "amin": "tl.atomic_min("}


def _program(builder, reduce, dtype="float32"):
    """out = x with v written/accumulated at pos (flat positions into x [5, 3])."""
    b = builder
    x = b.input("x", (5, 3), dtype)
    pos = b.input("pos", (8,), "int64")
    v = b.input("v", (8,), dtype)
    b.node("out", "scatter", [x, pos, v], (5, 3), dtype, reduce=reduce)
    plan = KernelPlan(b.graph(["out"]), "test", (kernel("pipec_scatter_0", "scatter", ["out"], [x, pos, v], ["out"],
                                                        (8,)),))
    program = generate_program(plan, CompileOptions())
    assert loads(dumps(program)) == program
    return verify_program(program)


@pytest.mark.parametrize("reduce", sorted(REDUCE))
def test_scatter_launches_match_torch(builder, reduce):
    program = _program(builder, reduce)
    init, body = program.kernels
    assert [s.target for s in program.steps] == ["pipec_scatter_0_init", "pipec_scatter_0"]
    assert [s.outputs for s in program.steps] == [("out",), ("out",)]  # both write the output buffer
    assert CALL[reduce] in body.source and "tl.atomic" not in init.source
    g = torch.Generator().manual_seed(0)
    x = -torch.rand(5, 3, generator=g) - 1  # negative floats: float atomic max/min must order them right
    v = -torch.rand(8, generator=g) * 3
    # repeats for the accumulating reduces; distinct positions for plain writes (eager's order is unspecified)
    pos = torch.randperm(15, generator=g)[:8] if reduce == "none" else torch.tensor([0, 4, 4, 14, 0, 0, 7, 4])
    (out,) = run_program(program, [x, pos, v])
    expected = x.reshape(-1).clone()
    if reduce == "none":
        expected[pos] = v
    else:
        expected.scatter_reduce_(0, pos, v, REDUCE[reduce])
    torch.testing.assert_close(out, expected.reshape(5, 3))


def test_positions_outside_self_are_dropped(builder):
    program = _program(builder, "sum", "int64")
    x = torch.arange(15).reshape(5, 3)
    (out,) = run_program(program, [x, torch.tensor([0, -1, 15, 99, 2, 2, 14, -7]), torch.full((8,), 10)])
    expected = x.reshape(-1).clone()
    expected[0] += 10
    expected[2] += 20
    expected[14] += 10
    torch.testing.assert_close(out, expected.reshape(5, 3))


def test_every_ir_scatter_reduce_has_a_triton_row():
    from pipec_codegen_triton.scatter import TRITON_SCATTER_WRITES
    from pipec_ir.ops import SCATTER_REDUCES

    assert set(TRITON_SCATTER_WRITES) == set(SCATTER_REDUCES)
