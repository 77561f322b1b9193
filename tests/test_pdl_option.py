"""The `pdl` option: programmatic dependent launch between the Triton kernels of a CUDA Graph
(runtime pdl.py). On by default on sm_90 GPUs; `pdl=False` or PIPEC_PDL=0 turns it off."""

import pytest
import torch

import pipec


def test_environment_variable_turns_it_off_for_every_compile(monkeypatch):
    monkeypatch.setenv("PIPEC_PDL", "0")
    assert pipec.make_options().get("pdl") is False
    assert pipec.make_options(pdl=True).get("pdl") is True
    monkeypatch.setenv("PIPEC_PDL", "1")
    assert pipec.make_options().get("pdl") is None  # the runtime's default: on


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                               torch.nn.Linear(256, 64), torch.nn.Softmax(dim=-1))


def test_without_cuda_graphs_the_option_changes_nothing():
    """Only a CUDA Graph's replay makes PDL's launcher free: elsewhere kernels load as written."""
    model = _mlp()
    x = torch.randn(8, 64)
    with torch.no_grad():
        torch.testing.assert_close(pipec.compile(model)(x), model(x))


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="PDL needs an sm_90 GPU")
def test_a_model_under_cuda_graphs_with_pdl_matches_eager():
    model = _mlp().cuda().to(torch.bfloat16)
    x = torch.randn(4096, 64, device="cuda", dtype=torch.bfloat16)
    compiled = pipec.compile(model, mode="reduce-overhead")  # on by default
    with torch.no_grad():
        want = model(x)
        for _ in range(3):  # warm-up, capture, replays
            got = compiled(x)
            torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
