"""A library result laid out channels-last stays so when a GEMM's epilogue reads it through a
view (codegen matmul_template.epilogue_inputs): ConvNeXt's downsampling conv feeds both the
next depthwise conv and, permuted to NHWC, the residual add in the block's last Linear's
epilogue. The epilogue read through the permute to the conv's result, so the runtime copied
that result row-major (and the permute of the copy again); the depthwise conv then took the
row-major copy: ATen's generic depthwise kernel on CUDA instead of cuDNN's channels-last one."""

import pytest
import torch

import pipec
from pipec_runtime_cudagraph import steps

transformers = pytest.importorskip("transformers")


def test_convnext_depthwise_convs_see_channels_last_inputs(monkeypatch):
    resolve, seen = steps.resolve_target, []

    def spy(target):
        op = resolve(target)
        if target != "aten.convolution.default":
            return op

        def conv(x, *args):
            if args[7] > 1:  # groups: a depthwise conv
                seen.append(x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous())
            return op(x, *args)
        return conv

    monkeypatch.setattr(steps, "resolve_target", spy)
    cfg = transformers.ConvNextConfig(num_stages=2, hidden_sizes=[16, 32], depths=[2, 2], image_size=64)
    torch.manual_seed(0)
    model = transformers.ConvNextModel(cfg).eval()
    x = torch.randn(1, 3, 64, 64)
    torch._dynamo.reset()
    with torch.no_grad():
        got = pipec.compile(model, cache="none")(pixel_values=x).last_hidden_state
        torch.testing.assert_close(got, model(pixel_values=x).last_hidden_state)
    assert len(seen) == 4 and all(seen), seen
