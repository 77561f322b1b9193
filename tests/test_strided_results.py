"""Library results laid out other than row-major (attention's output and gradients: [batch, heads,
seq, dim] stored as [batch, seq, heads, dim]) are read through their views, not copied row-major
first: the capture marks them `strided`, and fusion reads a view taken straight off one as a tensor
of its own (docs/IR.md, "extern"). BERT base's training step made two ATen copies of each of its 36
attention gradients before (1.6 ms of its 13.8 ms of GPU time on the H200)."""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F

import pipec


def attention_then_rows(x, w):
    b, length, _ = x.shape
    q = (x @ w).view(b, length, 2, 16).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, q, q)
    return out.transpose(1, 2).reshape(b, length, 32).sum(1)  # a kernel reading the result through views


def _steps(dump_dir) -> list[str]:
    (text,) = [p.read_text() for p in dump_dir.glob("*.codegen.txt")]
    return [line.strip() for line in text.splitlines() if " = launch " in line or " = extern " in line]


def test_a_kernel_reads_a_strided_result_through_its_view(tmp_path):
    torch.manual_seed(0)
    x, w = torch.randn(2, 8, 32), torch.randn(32, 32)
    compiled = pipec.compile(attention_then_rows, dump_dir=str(tmp_path), cache="none")
    torch.testing.assert_close(compiled(x, w), attention_then_rows(x, w))
    (capture,) = [p.read_text() for p in tmp_path.glob("*.capture.txt")]
    assert re.search(r"_scaled_dot_product_\w+ = extern\(.*strided=\[0", capture)  # the output is strided
    steps = _steps(tmp_path)
    (read,) = [re.match(r".* = launch pipec_sum_\d+\((\w+)", s).group(1) for s in steps if "launch pipec_sum" in s]
    made_by = next(s for s in steps if s.startswith(f"{read} = "))
    assert "extern aten.permute" in made_by, made_by  # the view, made by its call: row-major, not copied


def test_row_major_results_are_not_marked():
    from pipec_capture.extern_calls import _strided_results

    row_major = torch.empty(4, 6)
    assert _strided_results(row_major) == ()
    assert _strided_results((row_major, row_major.t(), 3)) == (1,)
    assert _strided_results(torch.empty(2, 3, 4).transpose(0, 1)) == (0,)


class ConvNeXtStage(torch.nn.Module):
    """Two ConvNeXt blocks (depthwise 7 x 7 conv, LayerNorm and MLP over NHWC, layer scale,
    residual add back in NCHW), as transformers' ConvNextLayer computes them."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.blocks = torch.nn.ModuleList()
        for _ in range(2):
            block = torch.nn.Module()
            block.dwconv = torch.nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
            block.norm = torch.nn.LayerNorm(channels)
            block.up, block.down = torch.nn.Linear(channels, 4 * channels), torch.nn.Linear(4 * channels, channels)
            block.gamma = torch.nn.Parameter(torch.rand(channels))
            self.blocks.append(block)

    def forward(self, x):
        x = x.permute(0, 3, 1, 2)  # the stem's NHWC LayerNorm, seen as NCHW
        for b in self.blocks:
            y = b.dwconv(x).permute(0, 2, 3, 1)
            y = b.gamma * b.down(F.gelu(b.up(b.norm(y))))
            x = x + y.permute(0, 3, 1, 2)
        return x


def _conv_input_strides(trace_path, fn, *inputs) -> list[tuple]:
    """The strides of every aten::convolution's input in one call of `fn`, from the profiler."""
    import json

    from torch.profiler import profile

    with profile(record_shapes=True) as prof:
        fn(*inputs)
    prof.export_chrome_trace(str(trace_path))
    events = json.loads(trace_path.read_text())["traceEvents"]
    return [tuple(e["args"]["Input Strides"][0]) for e in events
            if e.get("name") == "aten::convolution" and "Input Strides" in e.get("args", {})]


def test_a_channels_last_residual_stream_stays_channels_last(tmp_path):
    """Each residual add reads two NHWC tensors; eager's sum is channels-last, and so is pipec's
    (capture follow_layouts.py): every depthwise conv gets a channels-last input, which on CUDA
    takes cuDNN's NHWC kernel instead of ATen's generic depthwise one (ConvNeXt, suite run 9).
    Before, the second block's conv read a row-major NCHW sum."""
    torch.manual_seed(0)
    model = ConvNeXtStage().eval()
    x = torch.randn(2, 6, 6, 8)
    compiled = pipec.compile(model, dump_dir=str(tmp_path))
    with torch.no_grad():
        expected = model(x)
        torch.testing.assert_close(compiled(x), expected)
        strides = _conv_input_strides(tmp_path / "pipec.json", compiled, x)
        eager_strides = _conv_input_strides(tmp_path / "eager.json", model, x)
    channels_last = (8 * 36, 1, 6 * 8, 8)  # [2, 8, 6, 6] stored as [2, 6, 6, 8]
    assert eager_strides == [channels_last, channels_last]
    assert strides == [channels_last, channels_last]


def test_a_channels_last_residual_stream_trains_as_eager():
    """The same blocks trained: the backward graph's gradients flow through the rewritten adds
    (and their permutes); every parameter's gradient and the input's match eager's."""
    torch.manual_seed(1)
    model = ConvNeXtStage()
    reference = ConvNeXtStage()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 6, 6, 8)
    x_ref = x.clone().requires_grad_()
    x = x.requires_grad_()
    compiled = pipec.compile(model)
    compiled(x).square().sum().backward()
    reference(x_ref).square().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: f"{name}: {m}")
