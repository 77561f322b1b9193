"""Column sums over many rows run as partial sums and a sum of the partials (fusion's
split_reductions.py): results match eager, forward and in a training step's gradients (CPU:
Triton's interpreter; on a GPU, the GPU)."""

import copy

import pytest
import torch

import pipec

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def split_sums(watch_fusion_pass):
    """The names of the sums fusion split in this test."""
    return watch_fusion_pass("split_column_sums")


class ColumnSums(torch.nn.Module):
    def forward(self, g, x):
        y = g * x + 1
        return y.sum(dim=(0, 1)), (g * 3).sum(dim=(0, 1), keepdim=True) * 2, x.sum(0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_column_sums_match_eager(dtype, split_sums):
    torch.manual_seed(0)
    g, x = (torch.randn(8, 512, 16, device=DEVICE, dtype=dtype) for _ in range(2))
    model = ColumnSums()
    got = pipec.compile(model)(g, x)
    want = model(g.double(), x.double())
    # bf16: one rounding of a sum of 4096 values near 4096 (ulp 32), as eager's one bf16 result
    tol = {torch.float64: dict(atol=1e-9, rtol=1e-12), torch.float32: dict(atol=1e-3, rtol=1e-5)}.get(
        dtype, dict(atol=0.5, rtol=1e-2))
    for a, b in zip(got, want):
        assert a.dtype == dtype and a.shape == b.shape
        torch.testing.assert_close(a.double(), b, **tol)
    assert len(split_sums) == 2  # x.sum(0) sums 8 rows: left whole


def test_training_gradients_of_bias_and_layer_norm_weights_match_eager(split_sums):
    """Linear + LayerNorm over 4096 tokens: the bias and layer_norm weight gradients are the
    split column sums."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16),
                                torch.nn.LayerNorm(16)).to(DEVICE)
    twin = copy.deepcopy(model)
    x = torch.randn(4096, 16, device=DEVICE)
    compiled = pipec.compile(model)
    compiled(x).pow(2).mean().backward()
    twin(x).pow(2).mean().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    assert len(split_sums) >= 3  # two biases and the layer_norm weight and bias
