"""Peak memory of a call, measured on the CPU: pipec's plan against eager's profiled peak.

A call's figure for pipec comes from its Programs (pipec_runtime_cudagraph.memory.peak_report:
every value allocated at the step first writing it and freed after its last reader, library
results included, one alternative of each choice group at a time); eager's is the most bytes
torch's CPU allocator held at once during one call (torch.profiler's memory events).
"""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import pipec
from pipec.api import make_options
from pipec.pipeline import compile_graph
from pipec_capture.plugin import DynamoCapture
from pipec_runtime_cudagraph.memory import peak_report


class EncoderBlock(nn.Module):
    """A BERT layer: self-attention with a padding mask, dense + residual + LayerNorm, then an
    exact-GELU feed-forward four times as wide, + residual + LayerNorm (post-LN, as BERT)."""

    def __init__(self, d: int = 32, heads: int = 2, ffn: int = 128) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.up = nn.Linear(d, ffn)
        self.down = nn.Linear(ffn, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in self.qkv(x).split(c, -1))
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(b, t, c)
        x = self.ln1(x + self.out(y))
        return self.ln2(x + self.down(F.gelu(self.up(x))))


def _inputs(batch=2, seq=16, d=32):
    g = torch.Generator().manual_seed(1)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[1, seq - 3:] = 0
    return torch.randn(batch, seq, d, generator=g), mask


def _programs(model, inputs):
    """pipec's Programs for `model` on `inputs` (compiled, no kernel run: each graph runs eagerly)."""
    options = make_options(cache="none")
    programs = []

    def compile_aten_graph(gm, example_inputs, kind="inference"):
        programs.append(compile_graph(gm, example_inputs, options, name=f"g{len(programs)}", stop_after="codegen"))
        return lambda args: gm(*args)

    with torch.no_grad():
        torch.compile(model, backend=DynamoCapture().dynamo_backend(compile_aten_graph, options))(*inputs)
    torch._dynamo.reset()
    return programs


def _eager_peak(fn, inputs) -> int:
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        fn(*inputs)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = fn(*inputs)
    del out
    live = peak = 0
    for _, nbytes in sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                            if e.name() == "[memory]"):
        live += nbytes
        peak = max(peak, live)
    return peak


@pytest.fixture(scope="module")
def block():
    torch.manual_seed(0)
    model = EncoderBlock().eval()
    inputs = _inputs()
    [program] = _programs(model, inputs)
    return model, inputs, program


def test_encoder_block_plan_peak_is_at_most_eager(block):
    model, inputs, program = block
    report = peak_report(program)
    eager = _eager_peak(model, inputs)
    assert report["worst"] <= eager, (report, eager)


def test_every_alternative_reaches_the_liveness_bound(block):
    """Whichever alternative the GEMMs pick, the slots hold no more than freeing each value after
    its last reader would, and the library alternatives hold no more than the fused template
    (their epilogue kernel writes over cuBLAS's result instead of beside it)."""
    _, _, program = block
    report = peak_report(program)
    assert {"template", "library", "library_mm"} <= set(report)
    for name, figures in report.items():
        if name != "worst":
            assert figures["planned"] == figures["bound"], (name, figures)
    assert report["library"]["planned"] <= report["template"]["planned"]
    assert report["library_mm"]["planned"] <= report["template"]["planned"]


@pytest.mark.parametrize("choice", ["library", "library_mm"])
def test_library_epilogue_written_over_the_product_matches_eager(block, choice):
    model, inputs, _ = block
    with torch.no_grad():
        want = model(*inputs)
        compiled = pipec.compile(model, choice=choice)
        for _ in range(2):  # the general path, then the specialized run
            torch.testing.assert_close(compiled(*inputs), want, atol=2e-5, rtol=2e-5)
