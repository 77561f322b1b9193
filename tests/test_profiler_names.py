"""A pipec-compiled model under torch.profiler: the graph is a range named after it and each
kernel appears under its readable name (the name fusion gave it, which codegen makes the Triton
function's name): a range on the CPU (Triton's interpreter), the CUDA kernel on the GPU."""

from __future__ import annotations

import re

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import pipec


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        return torch.nn.functional.gelu(self.norm(x)) * 2


def compiled_block(device: str):
    torch.manual_seed(0)
    model = Block().to(device).eval()
    x = torch.randn(4, 16, device=device)
    compiled = pipec.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        compiled(x)  # warm: the profiled call takes the path later calls take
    kernels = [name for g in compiled.pipec_session.graphs for name, _ in g.kernels]
    assert [g.name for g in compiled.pipec_session.graphs] == ["block_0"]  # named after the model
    return compiled, model, x, kernels


def check_kernel_names(compiled, kernels):
    assert kernels and all(re.fullmatch(r"pipec_[a-z0-9_]+_\d+", k) for k in kernels), kernels
    for graph in compiled.pipec_session.graphs:  # the Triton function is named after the kernel
        for name, source in graph.kernels:
            assert re.search(rf"^def {name}\(", source, re.M), source


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU trace; the GPU has test_cuda_trace")
def test_cpu_trace_names_the_graph_and_its_kernels():
    compiled, model, x, kernels = compiled_block("cpu")
    check_kernel_names(compiled, kernels)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.testing.assert_close(compiled(x), model(x))
    names = [e.name for e in prof.events()]
    assert "pipec:block_0" in names, sorted(set(names))
    assert [n for n in names if n in kernels] == kernels


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_trace():
    compiled, model, x, kernels = compiled_block("cuda")
    check_kernel_names(compiled, kernels)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        out = compiled(x)
        torch.cuda.synchronize()
    torch.testing.assert_close(out, model(x))
    assert "pipec:block_0" in {e.name for e in prof.events()}
    gpu = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    assert set(kernels) <= gpu, (kernels, sorted(gpu))
