"""pipec's names in torch.profiler traces (profiling.py): each call of a program is a range
`pipec:<program>`; under Triton's CPU interpreter each kernel launch is a range named after the
kernel; with no profiler open nothing is recorded (not even a range object is made)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from pipec_ir import CompileOptions
from runtime_helpers import extern_program, slot_program

import pipec_runtime_cudagraph.profiling as profiling
from pipec_runtime_cudagraph import load_cudagraph, load_launch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture()
def options(tmp_path):
    return CompileOptions(runtime="launch").with_extra(kernel_dir=str(tmp_path / "kernels"))


def ranges(prof) -> list:
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]


def inside(event, outer) -> bool:
    """Whether `event`'s time interval lies in `outer`'s, on the same thread."""
    return (event.thread == outer.thread and outer.time_range.start <= event.time_range.start
            and event.time_range.end <= outer.time_range.end)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the kernels are CUDA kernels (test_cuda_trace)")
@pytest.mark.parametrize("calls", [1, 3])  # 3: the later calls would take the specialized run
def test_graph_and_kernel_ranges_on_the_cpu(options, calls):
    run = load_launch(slot_program(), options)
    x = torch.randn(8, 37)
    for _ in range(calls - 1):
        run([x])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = run([x])
    torch.testing.assert_close(out[0], (x + x).sum(1) * 2)
    events = ranges(prof)
    graphs = [e for e in events if e.name == "pipec:slots"]
    assert len(graphs) == 1
    kernels = [e for e in events if e.name.startswith("pipec_")]
    assert [e.name for e in kernels] == ["pipec_add_big", "pipec_sum_rows", "pipec_add_small"]
    assert all(inside(k, graphs[0]) for k in kernels)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the kernels are CUDA kernels (test_cuda_trace)")
def test_library_calls_keep_their_aten_names(options):
    run = load_launch(extern_program(), options)
    x, w, b = torch.randn(6, 5), torch.randn(7, 5), torch.randn(6, 7)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = run([x, w, b])
    torch.testing.assert_close(out[0], x @ w.T + b)
    names = [e.name for e in ranges(prof)]
    assert "pipec:externs" in names and "pipec_add_mm" in names and "aten::mm" in names


def test_no_range_without_a_profiler(options, monkeypatch):
    """The cheap path: with no profiler open, no record_function is entered."""
    run = load_launch(slot_program(), options)

    def fail(name):
        raise AssertionError(f"record_function({name!r}) with no profiler open")

    monkeypatch.setattr(torch.profiler, "record_function", fail)
    x = torch.randn(8, 37)
    for _ in range(3):
        torch.testing.assert_close(run([x])[0], (x + x).sum(1) * 2)


def test_cudagraph_runtime_names_the_graph_once(tmp_path):
    options = CompileOptions(runtime="cudagraph").with_extra(kernel_dir=str(tmp_path / "kernels"))
    no_cuda = pytest.warns(RuntimeWarning, match="no CUDA device")
    with contextlib.nullcontext() if torch.cuda.is_available() else no_cuda:
        run = load_cudagraph(slot_program(), options)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(8, 37, device=device)
    run([x])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = run([x])
    torch.testing.assert_close(out[0], (x + x).sum(1) * 2)
    assert [e.name for e in ranges(prof)].count("pipec:slots") == 1


@cuda
def test_cuda_trace_names_the_kernels(options):
    run = load_launch(slot_program(), options)
    x = torch.randn(8, 37, device="cuda")
    run([x])  # compiled (and specialized) before the trace: the fast launch path is traced
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        out = run([x])
        torch.cuda.synchronize()
    torch.testing.assert_close(out[0], (x + x).sum(1) * 2)
    names = {e.name for e in prof.events()}
    assert "pipec:slots" in names
    # torch >= 2.11 also puts the record_function ranges on the GPU timeline (as user annotations)
    gpu = sorted(e.name for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("pipec:"))
    # kernels with one body are one JITFunction in the process (kernels.load_kernel): the GPU runs
    # each under the name its body was first loaded with (pipec_add_small has pipec_add_big's body,
    # and an earlier test of the process may have loaded either body first under another name)
    assert len(gpu) == 3 and all(name.startswith("pipec_") for name in gpu), gpu
    assert len(set(gpu)) == 2, gpu  # the two adds are one function


def test_step_labels():
    class Launch:
        kernel = type("K", (), {"name": "pipec_fused_add_0"})()

    class Choice:
        name, alternatives = "mm_0", {"library": []}

    assert profiling.step_label(Launch()) == "pipec_fused_add_0"
    assert profiling.step_label(Choice()) == "pipec choice mm_0"
    assert profiling.step_label(object()) is None


def test_the_front_ends_graph_name_names_the_range(options):
    run = load_launch(slot_program(), options.with_extra(graph_name="mlp_0_backward"))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run([torch.randn(8, 37)])
    names = [e.name for e in ranges(prof)]
    assert "pipec:mlp_0_backward" in names and "pipec:slots" not in names
