"""A low-precision output outside the dtype's tolerances is judged against a float64 run."""

import re

import pytest
import torch
from torch import nn

import pipec.plugins
import pipec.reference
from pipec.api import compare_outputs, make_options, run_and_compare
from pipec.reference import lazy_float64_run

from pipec_cli_testing import run

EXACT = torch.linspace(9.0, 11.0, 16, dtype=torch.float64)  # bf16 rounds values near 10 to 1/16


def counted(value):
    """A reference returning `value`, counting its calls."""
    def reference():
        reference.calls += 1
        return value
    reference.calls = 0
    return reference


def test_output_closer_to_float64_than_eager_passes():
    eager = (EXACT + 0.4).to(torch.bfloat16)  # eager lost 0.4, pipec only bf16's rounding
    ours = EXACT.to(torch.bfloat16)
    err, strict = compare_outputs(ours, eager)
    assert strict.startswith("output 0 differs from eager") and err > 0.3
    reference = counted(EXACT)
    assert compare_outputs(ours, eager, reference=reference) == (err, None)
    assert reference.calls == 1


def test_reference_is_not_run_when_outputs_match():
    reference = counted(EXACT)
    x = EXACT.to(torch.bfloat16)
    assert compare_outputs((x, x), (x.clone(), x.clone()), reference=reference) == (0.0, None)
    assert reference.calls == 0


def test_reference_runs_once_for_several_failing_outputs():
    eager = (EXACT + 0.4).to(torch.bfloat16)
    ours = EXACT.to(torch.bfloat16)
    reference = counted((EXACT, EXACT))
    assert compare_outputs((ours, ours), (eager, eager), reference=reference)[1] is None
    assert reference.calls == 1


def test_wrong_output_still_fails_and_says_float64():
    eager = EXACT.to(torch.bfloat16)
    ours = eager + 1.0
    _, problem = compare_outputs((eager, ours), (eager, eager), reference=lambda: (EXACT, EXACT))
    assert problem.startswith("output 1 differs from eager: max abs error 1 (Mismatched elements: 16 / 16")
    assert re.search(r"\(100\.0%\)\); against float64 it is off by 1\.0\d, eager by 0\.0\d+$", problem), problem
    assert "\n" not in problem


def test_float64_itself_uses_the_strict_verdict():
    eager = EXACT + 0.4
    strict = compare_outputs(EXACT.clone(), eager)
    assert strict[1] is not None
    assert compare_outputs(EXACT.clone(), eager, reference=lambda: EXACT) == strict


def test_reference_that_is_not_float64_keeps_the_strict_verdict():
    eager = (EXACT + 0.4).to(torch.bfloat16)
    ours = EXACT.to(torch.bfloat16)
    strict = compare_outputs(ours, eager)
    assert compare_outputs(ours, eager, reference=lambda: EXACT.float()) == strict
    assert compare_outputs(ours, eager, reference=lambda: None) == strict


def test_nan_in_the_reference_proves_nothing():
    eager = (EXACT + 0.4).to(torch.bfloat16)
    ours = EXACT.to(torch.bfloat16)
    exact = EXACT.clone()
    exact[3] = float("nan")
    assert "against float64" in compare_outputs(ours, eager, reference=lambda: exact)[1]


class NoFloat64(nn.LayerNorm):
    """A LayerNorm whose float64 run raises, as an op without a float64 kernel would."""

    def forward(self, x):
        if x.dtype == torch.float64:
            raise RuntimeError("no float64 kernel")
        return super().forward(x)


def test_no_float64_run_for_functions_or_models_that_raise():
    x = (torch.randn(2, 8, dtype=torch.bfloat16),)
    assert lazy_float64_run(NoFloat64(8, dtype=torch.bfloat16), x, lambda m, xs: m(*xs))() is None
    assert lazy_float64_run(torch.sin, x, lambda m, xs: m(*xs))() is None
    assert lazy_float64_run(nn.LayerNorm(8, dtype=torch.bfloat16), x, lambda m, xs: m(*xs))() is not None


def test_float64_run_starts_from_the_state_eager_started_from():
    """A training step updates BatchNorm's running stats and accumulates onto gradients already
    there; the float64 run, made lazily after it, starts from them as they were before, and
    draws eager's dropout mask."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(4), nn.Dropout(0.5))
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    x = torch.randn(8, 4)

    def step(m, xs):
        out = m(*xs)
        out.sum().backward()
        return out

    reference = lazy_float64_run(model, (x,), step)
    eager = step(model, (x,))
    after = torch.get_rng_state()
    exact = reference()
    assert reference() is exact  # run once
    assert torch.equal(torch.get_rng_state(), after)  # the caller's random stream is not moved
    torch.testing.assert_close(exact.outputs, eager.double())
    for n, b in model.named_buffers():
        torch.testing.assert_close(exact.buffers[n], b.to(exact.buffers[n].dtype))
    for n, p in model.named_parameters():
        torch.testing.assert_close(exact.gradients[n], p.grad.double())


@pytest.fixture
def real_stages(monkeypatch):
    monkeypatch.setenv("PIPEC_DISABLE_PLUGINS", "broken")  # the example plugin's broken entry point, if installed
    pipec.plugins.reset_plugins()
    if "triton" not in pipec.plugins.get_registry().names("codegen"):
        pytest.skip("built-in stages not installed")


def layer_norm_training(cls=nn.LayerNorm):
    """bf16 LayerNorm training step: eager sums the weight gradient over 64 rows in bf16."""
    torch.manual_seed(0)
    return cls(512, dtype=torch.bfloat16), (torch.randn(64, 512, dtype=torch.bfloat16),)


def test_layer_norm_bf16_training_passes_against_float64(real_stages, monkeypatch):
    runs = []
    lazy = pipec.reference.lazy_float64_run

    def counting(model, inputs, step):
        return lazy(model, inputs, lambda m, xs: runs.append(1) or step(m, xs))

    monkeypatch.setattr(pipec.reference, "lazy_float64_run", lambda *a: lambda: None)
    _, _, strict, _ = run_and_compare(*layer_norm_training(), make_options(cache="none"))
    assert strict.startswith("gradient of weight differs from eager")

    torch._dynamo.reset()
    monkeypatch.setattr(pipec.reference, "lazy_float64_run", counting)
    _, max_error, mismatch, _ = run_and_compare(*layer_norm_training(), make_options(cache="none"))
    assert mismatch is None and max_error > 0.1
    assert len(runs) == 1  # one float64 run, for every output, gradient and buffer checked


def test_layer_norm_without_float64_run_keeps_the_strict_verdict(real_stages):
    _, _, mismatch, _ = run_and_compare(*layer_norm_training(NoFloat64), make_options(cache="none"))
    assert mismatch.startswith("gradient of weight differs from eager: max abs error")
    assert "float64" not in mismatch


def test_cli_compile_layer_norm_bf16(real_stages, tmp_path, capsys):
    model_file = tmp_path / "ln.py"
    model_file.write_text(
        "import torch\nfrom torch import nn\n"
        "model = nn.LayerNorm(512, dtype=torch.bfloat16)\n"
        "def example_inputs():\n    return (torch.randn(64, 512, dtype=torch.bfloat16),)\n")
    torch.manual_seed(0)
    code, _, err = run(["compile", model_file, "--device", "cpu", "--no-cache"], capsys)
    assert code == 0, err
