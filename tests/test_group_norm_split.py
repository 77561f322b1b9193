"""Long sums over few rows run as partials per block and their combine (fusion's split_rows.py):
group norms, variances and whole-tensor sums match eager, forward and in a training step's
gradients (CPU: Triton's interpreter; on a GPU, the GPU)."""

import copy

import pytest
import torch

import pipec

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def split_rows(watch_fusion_pass):
    """The names of the sums fusion split in this test."""
    return watch_fusion_pass("split_row_reductions")


class NormBlock(torch.nn.Module):
    """A UNet resnet block's start: group norm, SiLU, a 1 x 1 conv, another group norm."""

    def __init__(self, channels=32, groups=8):
        super().__init__()
        self.norm1 = torch.nn.GroupNorm(groups, channels)
        self.conv = torch.nn.Conv2d(channels, channels, 1)
        self.norm2 = torch.nn.GroupNorm(groups, channels, eps=1e-6)

    def forward(self, x):
        return self.norm2(self.conv(torch.nn.functional.silu(self.norm1(x))))


def test_group_norm_matches_eager_with_a_large_mean(split_rows):
    """Values around 50 with a spread of 4: a variance formed as E[x^2] - E[x]^2 would lose digits;
    Welford's blocks combined by Chan's formula keep eager's. The conv runs without TF32 (cuDNN's
    default on a GPU), whose 10-bit products alone would be 2e-3 off (eager's error on the H100)."""
    torch.manual_seed(0)
    model = NormBlock().to(DEVICE).eval()
    x = torch.randn(2, 32, 64, 64, device=DEVICE) * 4 + 50  # rows of 4 x 4096 = 16384 values
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        got = pipec.compile(model)(x)
        want = copy.deepcopy(model).double()(x.double())
    torch.testing.assert_close(got.double(), want, atol=2e-4, rtol=1e-4)
    assert len(split_rows) >= 4  # both norms' sum and squared-deviation sum


def test_training_gradients_match_eager(split_rows):
    torch.manual_seed(0)
    model = NormBlock().to(DEVICE)
    twin = copy.deepcopy(model)
    x = torch.randn(2, 32, 64, 64, device=DEVICE) + 1
    pipec.compile(model)(x).pow(2).mean().backward()
    twin(x).pow(2).mean().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    assert len(split_rows) >= 4  # the forward's statistics (the backward sums per channel: 4096 values, whole)


class Reductions(torch.nn.Module):
    def forward(self, x):
        var, mean = torch.var_mean(x, dim=1, correction=0)
        return var, mean, x.sum(), (x * 2).mean(dim=1, keepdim=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_variances_and_whole_sums_match_eager(dtype, split_rows):
    torch.manual_seed(0)
    x = torch.randn(4, 32768, device=DEVICE, dtype=dtype) * 3 - 7
    got = pipec.compile(Reductions())(x)
    want = Reductions()(x.double())
    tol = dict(atol=1e-3, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-9, rtol=1e-12)
    for a, b in zip(got, want):
        assert a.dtype == dtype and a.shape == b.shape
        torch.testing.assert_close(a.double(), b, **tol)
    assert split_rows


def assert_bf16_like_eager(block: torch.nn.Module, size: int) -> None:
    """`block` in bf16, compiled, on a 2 x 32 x size x size input: each output as far from float64
    as eager's own bf16 result, give or take one rounding."""
    torch.manual_seed(0)
    model = block.to(DEVICE, torch.bfloat16).eval()
    x = torch.randn(2, 32, size, size, device=DEVICE, dtype=torch.bfloat16)
    with torch.no_grad():
        got = pipec.compile(model)(x)
        want = copy.deepcopy(model).double()(x.double())
        eager = model(x)
    for g, w, e in zip(*(t if isinstance(t, tuple) else (t,) for t in (got, want, eager))):
        assert (g.double() - w).abs().max() <= 2 * (e.double() - w).abs().max() + 1e-2


def test_bf16_group_norm_matches_eager(split_rows):
    """A bf16 activation is summed in fp32 (the decomposition casts first): that sum splits."""
    assert_bf16_like_eager(NormBlock(), 64)
    assert split_rows


class ResidualBlock(torch.nn.Module):
    """A UNet resnet block's end and the next block's norm: the residual sum is kept in bf16 for
    the skip path and normalized in fp32 (group norm's decomposition casts it first)."""

    def __init__(self, channels=32, groups=8):
        super().__init__()
        self.norm1 = torch.nn.GroupNorm(groups, channels)
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.norm2 = torch.nn.GroupNorm(groups, channels)

    def forward(self, x):
        out = (x + self.conv(torch.nn.functional.silu(self.norm1(x)))) / 1.0
        return out, self.norm2(out)


@pytest.fixture
def fused_plans(monkeypatch):
    """The kernel plans fusion makes in this test."""
    import pipec_fusion

    plans, real = [], pipec_fusion.fuse_graph
    monkeypatch.setattr(pipec_fusion, "fuse_graph", lambda *a, **k: plans.append(real(*a, **k)) or plans[-1])
    return plans


def test_the_next_norm_reads_the_bf16_residual_sum(fused_plans):
    """No kernel stores the fp32 cast of a value it also stores in bf16: the norm's kernels read
    the bf16 sum and widen it (fusion recompute_stored.py), and the results match eager's."""
    assert_bf16_like_eager(ResidualBlock(), 32)
    (plan,) = fused_plans
    nodes = plan.graph.node_map()
    for k in plan.kernels:
        casts = [o for o in k.outputs if nodes[o].op == "cast" and nodes[o].type.dtype == "float32"]
        assert not (casts and len(k.outputs) > 1), f"{k.name} stores {casts} beside {k.outputs}"
