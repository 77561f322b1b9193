"""Every example through the whole pipeline, under every fusion preset, against eager."""

import pytest
import torch

import pipec

from conftest import EXAMPLES, load_example


def _flat(out):
    return list(out) if isinstance(out, tuple | list) else [out]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_eager_and_fusion_presets_order(path):
    model, inputs = load_example(path)
    with torch.no_grad():
        expected = _flat(model(*inputs))
        kernels = {}
        for policy in ("none", "default", "aggressive"):
            torch._dynamo.reset()
            compiled = pipec.compile(model, fusion=policy)
            got = _flat(compiled(*inputs))
            for g, e in zip(got, expected, strict=True):
                torch.testing.assert_close(g, e, atol=2e-5, rtol=2e-5)
            torch._dynamo.reset()
            # kernels as fusion made them: combo kernels would launch independent ones together
            report = pipec.explain(model, *inputs, fusion=policy, combo_kernels=False)
            kernels[policy] = report.kernel_count
    assert kernels["none"] > kernels["default"] >= kernels["aggressive"], kernels


def test_explain_reports_fusions_and_library_calls():
    model, inputs = load_example(next(p for p in EXAMPLES if p.stem == "gpt2_block"))
    with torch.no_grad():
        report = pipec.explain(model, *inputs)
    assert report.graph_count >= 1
    assert report.fusion_count >= 1
    assert report.op_count > report.kernel_count
    data = report.to_json()
    assert '"kernel_count"' in data


def test_torch_compile_backend_name():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        compiled = torch.compile(model, backend="pipec")
        torch.testing.assert_close(compiled(x), model(x))


def test_graph_break_still_correct():
    def f(x):
        y = torch.relu(x) * 2
        print("graph break")  # noqa: T201
        return torch.softmax(y, -1) + 1

    x = torch.randn(4, 8)
    torch.testing.assert_close(pipec.compile(f)(x), f(x))
    torch._dynamo.reset()
    report = pipec.explain(f, x)
    assert report.graph_count == 2 and report.graph_break_count == 1


def test_unlowered_op_runs_as_extern_with_warning():
    def f(x):
        return torch.median(torch.sin(x)) * 3  # median has no lowering

    x = torch.randn(5, 3)
    with pytest.warns(UserWarning, match="median"):
        out = pipec.compile(f)(x)
    torch.testing.assert_close(out, f(x))
