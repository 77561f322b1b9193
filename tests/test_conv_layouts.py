"""16-bit convolutions over channels-last operands (capture conv_layouts.py), through the whole
pipeline: a Stable Diffusion style ResNet block (group norm, SiLU, conv, the time embedding's
add, conv, residual) in bfloat16 against eager. The pass is CUDA-only; here it is switched on
for the CPU so the interpreter checks the numerics of the NHWC copies, the pointwise ops kept
over the convs' NHWC results and the output copied back to eager's strides."""

import pytest
import torch
from torch import nn

import pipec
from pipec_capture import conv_bias, conv_layouts
from pipec_ir import loads


class ResnetBlock(nn.Module):
    def __init__(self, channels=8, groups=4, temb=6):
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(groups, channels), nn.GroupNorm(groups, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.time = nn.Linear(temb, channels)

    def forward(self, x, t):
        h = self.conv1(nn.functional.silu(self.norm1(x)))
        h = h + self.time(nn.functional.silu(t))[:, :, None, None]
        h = self.conv2(nn.functional.silu(self.norm2(h)))
        return x + h


TOLERANCE = {torch.bfloat16: dict(rtol=2e-2, atol=2e-2), torch.float16: dict(rtol=5e-3, atol=5e-3)}


@pytest.fixture
def layouts_on_cpu(monkeypatch):
    """The pass (and the bias split it follows on CUDA) switched on for the CPU; yields the list
    of how many convs each graph rewrote."""
    from pipec_capture import lowerer

    monkeypatch.setattr(conv_bias, "SPLIT_ON", ("cuda", "cpu"))
    monkeypatch.setattr(conv_layouts, "LAYOUT_ON", ("cuda", "cpu"))
    counts = []
    monkeypatch.setattr(lowerer, "convs_channels_last",
                        lambda gm: counts.append(conv_layouts.convs_channels_last(gm)) or counts[-1])
    return counts


def test_resnet_block_bf16_matches_eager_with_nhwc_convs(layouts_on_cpu):
    torch.manual_seed(0)
    model = ResnetBlock().to(torch.bfloat16).eval()
    x, t = torch.randn(2, 8, 6, 6, dtype=torch.bfloat16), torch.randn(2, 6, dtype=torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(x, t)
        got = pipec.compile(model, cache="none")(x, t)
    assert layouts_on_cpu == [2]
    # bf16: the interpreter rounds float32 -> bfloat16 by truncation (README, "Testing")
    torch.testing.assert_close(got, expected, rtol=3e-2, atol=3e-2)
    assert got.stride() == expected.stride()


@pytest.mark.parametrize("how", ["default", "option off", "env off"])
def test_the_nhwc_copies_of_a_larger_block_are_tiled_and_match_eager(layouts_on_cpu, tmp_path, monkeypatch, how):
    """At 32 channels on 32 x 32 pixels the NHWC copies transpose enough to be written in 2-d
    tiles (codegen tiling.py, on by default): the whole block matches eager with them, and flat,
    with `tiled_transposes=False` or PIPEC_TILED_TRANSPOSES=0 for a whole process."""
    options = {"tiled_transposes": False} if how == "option off" else {}
    if how == "env off":
        monkeypatch.setenv("PIPEC_TILED_TRANSPOSES", "0")
    torch.manual_seed(0)
    model = ResnetBlock(channels=32, groups=8, temb=16).to(torch.bfloat16).eval()
    x, t = torch.randn(2, 32, 32, 32, dtype=torch.bfloat16), torch.randn(2, 16, dtype=torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(x, t)
        got = pipec.compile(model, cache="none", dump_dir=str(tmp_path), **options)(x, t)
    assert layouts_on_cpu == [2]
    torch.testing.assert_close(got, expected, rtol=3e-2, atol=3e-2)
    (program,) = tmp_path.glob("*.codegen.txt")
    assert ("YBLOCK" in program.read_text()) == (how == "default")


class UpBlock(nn.Module):
    """A UNet up block's join: the upsampled path and a skip connection, each a ResNet block's
    NHWC output (over a conv's, as a UNet's blocks follow its first conv), concatenated along the
    channels, then group norm, SiLU and a conv."""

    def __init__(self, channels=16, skip=8, groups=4):
        super().__init__()
        self.conv_x, self.conv_r = nn.Conv2d(channels, channels, 1), nn.Conv2d(skip, skip, 1)
        self.up, self.down = ResnetBlock(channels, groups), ResnetBlock(skip, groups)
        self.norm = nn.GroupNorm(groups, channels + skip)
        self.conv = nn.Conv2d(channels + skip, channels, 3, padding=1)

    def forward(self, x, r, t):
        h = torch.cat([self.up(self.conv_x(x), t[:, :6]), self.down(self.conv_r(r), t[:, 6:])], dim=1)
        return self.conv(nn.functional.silu(self.norm(h)))


def test_a_skip_connection_cat_stays_channels_last_and_matches_eager(layouts_on_cpu, tmp_path):
    """The cat of two NHWC block outputs is joined over NHWC (follow_layouts.py): no copy of it
    to NHWC before the conv, no index arrays stored, and eager's values."""
    from pipec_ir import loads

    torch.manual_seed(0)
    model = UpBlock().to(torch.bfloat16).eval()
    x, r = torch.randn(2, 16, 8, 8, dtype=torch.bfloat16), torch.randn(2, 8, 8, 8, dtype=torch.bfloat16)
    t = torch.randn(2, 12, dtype=torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(x, r, t)
        got = pipec.compile(model, cache="none", dump_dir=str(tmp_path))(x, r, t)
    torch.testing.assert_close(got, expected, rtol=3e-2, atol=3e-2)
    assert got.stride() == expected.stride()
    (graph,) = [loads(f.read_text()) for f in tmp_path.glob("*.capture.json")]
    cats = [n for n in graph.nodes if n.op == "where" and n.name.startswith("cat")]
    assert cats and all(len(n.type.shape) == 4 and str(n.type.shape[3]) == "24" for n in cats)  # NHWC
    (plan,) = [loads(f.read_text()) for f in tmp_path.glob("*.fusion.json")]
    types = plan.graph.types()
    assert not [o for k in plan.kernels for o in k.outputs if types[o].dtype == "int64"]


@pytest.mark.parametrize("how", ["option", "env"])
def test_the_switch_turns_the_pass_off(layouts_on_cpu, monkeypatch, how):
    """`conv_channels_last=False`, or PIPEC_CONV_CHANNELS_LAST=0 for a whole process: the convs
    keep NCHW operands (an A/B switch, and a way out if a model runs slower channels-last)."""
    torch.manual_seed(0)
    model = ResnetBlock().to(torch.bfloat16).eval()
    x, t = torch.randn(2, 8, 6, 6, dtype=torch.bfloat16), torch.randn(2, 6, dtype=torch.bfloat16)
    options = {"conv_channels_last": False} if how == "option" else {}
    if how == "env":
        monkeypatch.setenv("PIPEC_CONV_CHANNELS_LAST", "0")
    torch._dynamo.reset()
    with torch.no_grad():
        got = pipec.compile(model, cache="none", **options)(x, t)
        torch.testing.assert_close(got, model(x, t), rtol=3e-2, atol=3e-2)
    assert layouts_on_cpu == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_resnet_block_on_cuda_matches_eager(dtype):
    """On CUDA the pass is on by default: cuDNN's NHWC kernels, against eager's NCHW convs."""
    from pipec_capture import lowerer

    counts = []
    original = lowerer.convs_channels_last
    lowerer.convs_channels_last = lambda gm: counts.append(original(gm)) or counts[-1]
    try:
        torch.manual_seed(0)
        model = ResnetBlock(channels=32, groups=8, temb=16).to("cuda", dtype).eval()
        x, t = torch.randn(2, 32, 16, 16, device="cuda", dtype=dtype), torch.randn(2, 16, device="cuda", dtype=dtype)
        torch._dynamo.reset()
        with torch.no_grad():
            expected = model(x, t)
            got = pipec.compile(model, cache="none")(x, t)
    finally:
        lowerer.convs_channels_last = original
    assert counts == [2]
    # cuDNN's NHWC kernels sum in another order than its NCHW ones: a few ulps of the output
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
    assert got.stride() == expected.stride()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_up_block_on_cuda_matches_eager_with_its_cat_channels_last(tmp_path):
    """On CUDA the layout passes are on by default: the skip connection's cat joins NHWC parts
    (follow_layouts.py), and the group norm after it splits its statistics (fusion split_rows.py:
    8 rows of 6 x 4096 values at 64 x 64 pixels)."""
    from pipec_ir import loads

    torch.manual_seed(0)
    model = UpBlock().to("cuda", torch.bfloat16).eval()
    x = torch.randn(2, 16, 64, 64, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(2, 8, 64, 64, device="cuda", dtype=torch.bfloat16)
    t = torch.randn(2, 12, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(x, r, t)
        got = pipec.compile(model, cache="none", dump_dir=str(tmp_path))(x, r, t)
    torch.testing.assert_close(got, expected, **TOLERANCE[torch.bfloat16])
    assert got.stride() == expected.stride()
    (graph,) = [loads(f.read_text()) for f in tmp_path.glob("*.capture.json")]
    cats = [n for n in graph.nodes if n.op == "where" and n.name.startswith("cat")]
    assert cats and all(str(n.type.shape[3]) == "24" for n in cats)  # joined over NHWC


class Bottleneck(nn.Module):
    """ResNet's bottleneck (1 x 1, 3 x 3, 1 x 1 convs with batch norms), its shortcut a 1 x 1 conv
    where the width changes."""

    def __init__(self, cin, width, cout):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = (nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))
                         if cin != cout else nn.Identity())

    def forward(self, x):
        return torch.relu(self.layers(x) + self.shortcut(x))


def _conv_net_plan(model, x, tmp_path):
    """`model` in bf16 with batch-norm statistics of its own (not the identity), compiled and
    checked against eager on `x`; its plan and the plan's buffer types by name."""
    model = model.to(torch.bfloat16).eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    x = x.to(torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(x)
        got = pipec.compile(model, cache="none", dump_dir=str(tmp_path))(x)
    torch.testing.assert_close(got, expected, rtol=3e-2, atol=3e-2)
    (program,) = tmp_path.glob("*.codegen.json")
    plan = loads(program.read_text())
    return plan, {b.name: b.type for b in (*plan.inputs, *plan.buffers)}


def test_resnet_stages_store_each_block_output_once(layouts_on_cpu, tmp_path):
    """Each block's output feeds the next block's first conv and its residual add. The sum is
    computed over the convs' NHWC results, so it is stored once, NHWC, and the conv reads that
    (capture `drop_needless_copies`): no kernel also stores an NHWC copy of it (ResNet-50's
    first block's two 51 MiB stores set its peak). Values as eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(Bottleneck(8, 4, 16), Bottleneck(16, 4, 16), Bottleneck(16, 4, 16))
    plan, types = _conv_net_plan(model, torch.randn(2, 8, 6, 6), tmp_path)
    assert layouts_on_cpu == [10]
    twice = [s.target for s in plan.steps if s.kind == "launch" and len(s.outputs) != len({types[o] for o in s.outputs})]
    assert not twice, f"kernels storing one value twice: {twice}"


def test_a_resnet_stem_pools_its_nhwc_storage_and_matches_eager(layouts_on_cpu, tmp_path):
    """conv 7 x 7 / 2, batch norm, ReLU, max pool 3 x 3 / 2 with padding, then a bottleneck: the
    ReLU is stored NHWC, the pool reads it there in one kernel (capture pool_layouts.py: no
    padded copy, no NCHW result) and the bottleneck's convs read the pool's result as it is
    stored. Each batch norm's per-channel scale is computed in the kernel that applies it
    (fusion `cheap_broadcast`), not in a kernel of its own. Values as eager's."""
    torch.manual_seed(0)
    stem = nn.Sequential(nn.Conv2d(3, 8, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(3, stride=2, padding=1), Bottleneck(8, 4, 16))
    plan, types = _conv_net_plan(stem, torch.randn(2, 3, 22, 22), tmp_path)
    launches = [s for s in plan.steps if s.kind == "launch"]
    pools = [s for s in launches if any("max_pool2d_nhwc" in o for o in s.outputs)]
    assert len(pools) == 1 and types[pools[0].outputs[0]].shape == (2, 6, 6, 8)  # NHWC
    (relu,) = pools[0].inputs
    assert types[relu].shape == (2, 11, 11, 8)  # it reads the ReLU as stored, NHWC
    pooled = pools[0].outputs[0]
    assert not [s.target for s in launches if pooled in s.inputs], "the pool's result is copied"
    channels_only = [s.target for s in launches if all(len(types[o].shape) == 1 for o in s.outputs)]
    assert not channels_only, f"batch norm scales computed on their own: {channels_only}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_resnet_stem_on_cuda_matches_eager(dtype):
    """On CUDA the layout passes are on by default: the stem's max pool gathers its clamped taps
    from the ReLU's NHWC storage (the interpreter checks no bounds; compiled Triton does), on an
    input whose edges the windows overhang (odd sizes, ceil_mode off and on)."""
    torch.manual_seed(0)
    for ceil_mode in (False, True):
        stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                             nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=ceil_mode), Bottleneck(64, 16, 64))
        model = stem.to("cuda", dtype).eval()
        x = torch.randn(4, 3, 67, 61, device="cuda", dtype=dtype)
        torch._dynamo.reset()
        with torch.no_grad():
            expected = model(x)
            got = pipec.compile(model, cache="none")(x)
        torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
