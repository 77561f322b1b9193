"""A convolution's bias split off as a pointwise add on CUDA (capture conv_bias.py), where ATen's
cuDNN path would add it in a kernel of its own. The split is CUDA-only; here it is switched on
for the CPU so the interpreter checks the numerics: ConvNeXt's block (a channels-last depthwise
conv, its bias, a permute and a layer norm) and a plain conv net against eager, and the kernel
plan has no conv with a bias left."""

import pytest
import torch
from torch import nn

import pipec
from pipec_capture import conv_bias


class ConvNextBlock(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pw = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(2 * dim, dim)

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.out(torch.nn.functional.gelu(self.pw(self.norm(y)))).permute(0, 3, 1, 2)
        return x + y


def conv_net():
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.Conv2d(8, 4, 1))


@pytest.fixture
def split_on_cpu(monkeypatch):
    """The split switched on for the CPU; yields the list of how many convs each graph split."""
    from pipec_capture import lowerer

    monkeypatch.setattr(conv_bias, "SPLIT_ON", ("cuda", "cpu"))
    counts = []
    monkeypatch.setattr(lowerer, "split_conv_bias", lambda gm: counts.append(conv_bias.split_conv_bias(gm)) or counts[-1])
    return counts


@pytest.mark.parametrize("make, shape, channels_last", [
    (ConvNextBlock, (2, 8, 6, 6), True), (ConvNextBlock, (2, 8, 6, 6), False), (conv_net, (2, 3, 9, 9), False)],
    ids=["convnext_nhwc", "convnext_nchw", "conv_relu_conv"])
def test_split_bias_matches_eager(split_on_cpu, make, shape, channels_last):
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape)
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    with torch.no_grad():
        got = pipec.compile(model, cache="none")(x)
        torch.testing.assert_close(got, model(x))
    assert sum(split_on_cpu) == sum(isinstance(m, nn.Conv2d) for m in model.modules())


def test_split_only_where_asked():
    from torch.fx.experimental.proxy_tensor import make_fx

    def conv(x, w, b):
        return torch.ops.aten.convolution(x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)

    gm = make_fx(conv, tracing_mode="fake")(torch.randn(1, 3, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(4))
    assert conv_bias.split_conv_bias(gm) == 0  # a CPU graph: oneDNN adds the bias itself
    assert conv_bias.split_conv_bias(gm, devices=("cpu",)) == 1
    convs = [n for n in gm.graph.nodes if n.target is torch.ops.aten.convolution.default]
    assert len(convs) == 1 and convs[0].args[2] is None
    (add,) = [n for n in gm.graph.nodes if n.target is torch.ops.aten.add.Tensor]
    assert tuple(add.meta["val"].shape) == (1, 4, 3, 3)
    x, w, b = torch.randn(1, 3, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(4)
    torch.testing.assert_close(gm(x, w, b), conv(x, w, b))
