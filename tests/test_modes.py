"""torch.compile's modes through both entry points (README, "Modes"): pipec.compile(mode=...) and
torch.compile(backend="pipec", mode=...). On the CPU the cudagraph runtime runs as `launch` and
nothing is timed, so what is checked here is that each mode compiles, runs like eager, and
reaches the stages as the runtime and the `max_autotune` option it stands for."""

import pytest
import torch

import pipec
import pipec.backend

MODES = {"default": ("launch", False), "reduce-overhead": ("cudagraph", False),
         "max-autotune": ("cudagraph", True), "max-autotune-no-cudagraphs": ("launch", True)}


@pytest.fixture
def seen_options(monkeypatch):
    """The options every graph's pipeline ran with."""
    seen = []
    real = pipec.backend.compile_graph

    def spy(source, example_inputs, options, **kwargs):
        seen.append(options)
        return real(source, example_inputs, options, **kwargs)

    monkeypatch.setattr(pipec.backend, "compile_graph", spy)
    return seen


def _model_and_input():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
    return model, torch.randn(3, 8)


@pytest.mark.parametrize("entry", ["pipec.compile", "torch.compile"])
@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_compiles_and_runs_like_eager(seen_options, entry, mode):
    model, x = _model_and_input()
    if entry == "pipec.compile":
        compiled = pipec.compile(model, mode=mode)
    else:  # before: BackendCompilerFailed (ValueError: unknown mode) for the max-autotune modes
        compiled = torch.compile(model, backend="pipec", mode=mode)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    runtime, exhaustive = MODES[mode]
    assert seen_options and all(o.runtime == runtime for o in seen_options)
    assert all(bool(o.get("max_autotune", False)) is exhaustive for o in seen_options)


def test_max_autotune_refuses_options_that_turn_tuning_down():
    model, _ = _model_and_input()
    for less in ({"autotune": False}, {"autotune_configs": 2}, {"choice": "library"}):
        with pytest.raises(ValueError, match="mode='max-autotune' tunes every config"):
            pipec.compile(model, mode="max-autotune", **less)
    pipec.compile(model, mode="max-autotune", autotune=True)  # asking for what the mode does is fine
    with pytest.raises(ValueError, match="unknown mode 'fastest'"):
        pipec.compile(model, mode="fastest")
