"""Sibling GEMMs (codegen matmul_siblings.py, the codegen option `grouped_matmuls=True`): Q, K and
V of one input as one choice group whose `grouped` alternative is a single launch over all three
weights; every alternative matches eager."""

import pytest
import torch
from torch import nn

import pipec_ir
from pipec_ir import get_attr
from pipec_runtime_cudagraph.choices import choices_made
from pipec_runtime_cudagraph.launch import ProgramRunner

from test_gemm_epilogue import GPU, _program


class Attention(nn.Module):
    """A self-attention block's projections: three Linears of one input, then views of each."""

    def __init__(self, width=64, heads=4):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        self.out = nn.Linear(width, width)

    def forward(self, x):
        b, t, w = x.shape
        split = lambda y: y.view(b, t, self.heads, w // self.heads).transpose(1, 2)  # noqa: E731
        y = nn.functional.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)))
        return self.out(y.transpose(1, 2).reshape(b, t, w))


def _groups(program) -> dict[str, list[str]]:
    """choice group -> its alternatives, in order."""
    out: dict[str, list[str]] = {}
    for step in program.steps:
        group = get_attr(step.attrs, "choice")
        if group is not None and get_attr(step.attrs, "alternative") not in out.setdefault(group, []):
            out[group].append(get_attr(step.attrs, "alternative"))
    return out


def test_q_k_v_become_one_group_with_a_grouped_launch():
    torch.manual_seed(0)
    model = Attention().eval()
    program, _ = _program(model, (torch.randn(2, 16, 64),), grouped_matmuls=True)
    groups = _groups(program)
    grouped = [g for g, alternatives in groups.items() if "grouped" in alternatives]
    assert len(grouped) == 1 and groups[grouped[0]][:2] == ["template", "grouped"]
    launch = next(s for s in program.steps if get_attr(s.attrs, "alternative") == "grouped")
    assert len(launch.outputs) == 3 and len(set(launch.inputs)) == len(launch.inputs) == 7  # x, 3 weights, 3 biases
    # the output projection reads another input: a group of its own, without a grouped alternative
    assert sum(1 for alternatives in groups.values() if "grouped" not in alternatives) == 1
    pipec_ir.verify(program)
    off, _ = _program(model, (torch.randn(2, 16, 64),))  # off by default
    assert not any("grouped" in a for a in _groups(off).values()) and len(_groups(off)) == 4


@pytest.mark.parametrize("choice", ["grouped", "template", "library"])
def test_each_alternative_of_the_siblings_matches_eager(choice):
    torch.manual_seed(0)
    model = Attention().eval()
    x = torch.randn(2, 16, 64)
    program, args = _program(model, (x,), grouped_matmuls=True)
    runner = ProgramRunner(program, pipec_ir.CompileOptions().with_extra(choice=choice))
    with torch.no_grad():
        torch.testing.assert_close(runner(args)[0], model(x))
    merged = next(g for g, alternatives in _groups(program).items() if "grouped" in alternatives)
    assert choices_made(runner)[merged]["forced"] == choice  # the siblings ran as forced


def test_explain_says_each_sibling_runs_in_the_first_ones_group():
    import pipec

    torch.manual_seed(0)
    report = pipec.explain(Attention().eval(), torch.randn(2, 16, 64), grouped_matmuls=True)
    runs = [k["runs_as"] for g in report.graphs for k in g["kernels"] if k["kind"] == "matmul"]
    assert runs[0] == "the fastest of template, grouped, library, library_mm"
    assert runs[1:3] == [f"in {report.graphs[0]['kernels'][0]['name']}'s group: " + runs[0]] * 2, runs


def test_siblings_with_a_dependency_stay_apart():
    """k reads q's result: the second product cannot run beside the first."""

    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k = nn.Linear(64, 64), nn.Linear(64, 64)

        def forward(self, x):
            return self.k(x) + self.q(self.k(x))

    torch.manual_seed(0)
    model = Chain().eval()
    x = torch.randn(32, 64)
    program, args = _program(model, (x,), grouped_matmuls=True)
    assert not any("grouped" in a for a in _groups(program).values())


@pytest.mark.skipif(not GPU, reason="bf16 tensor-core tiles and the timed choice need the GPU machine")
def test_gpu_grouped_bf16_matches_eager_and_is_timed():
    torch.manual_seed(0)
    model = Attention(width=1024, heads=16).cuda().to(torch.bfloat16).eval()
    x = torch.randn(8, 512, 1024, device="cuda", dtype=torch.bfloat16)
    program, args = _program(model, (x,), grouped_matmuls=True)
    with torch.no_grad():
        want = model(x)
        forced = ProgramRunner(program, pipec_ir.CompileOptions(autotune=True).with_extra(choice="grouped"))
        torch.testing.assert_close(forced(args)[0], want, atol=4e-2, rtol=2e-2)
        tuned = ProgramRunner(program, pipec_ir.CompileOptions(autotune=True))
        torch.testing.assert_close(tuned(args)[0], want, atol=4e-2, rtol=2e-2)
    timings = [t for g in choices_made(tuned).values() for t in g["timings_ms"].values() if "grouped" in t]
    assert timings and all(0 < v < 1e3 for v in timings[0].values())
    print("sibling group timings (ms):", timings[0])
