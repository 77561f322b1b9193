"""Programmatic dependent launch under CUDA Graphs (pdl.py): the source a Triton kernel is
loaded from, and a chain of dependent kernels replayed with it (sm_90 GPUs only)."""

from __future__ import annotations

import ast

import pytest
import torch

from pipec_ir import Buffer, CompileOptions, Program, Step
from runtime_helpers import ADD_SOURCE, ROWSUM_SOURCE, T, add_kernel

from pipec_runtime_cudagraph import load_cudagraph, load_launch
from pipec_runtime_cudagraph.pdl import GRID_DEPENDENCY, grid_dependency_source, pdl_supported
from pipec_runtime_cudagraph.steps import LaunchStep

GLUON_SOURCE = '''\
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def k(x_ptr, n, BLOCK: gl.constexpr):
    pid = gl.program_id(0)
'''


def _body(source: str, name: str) -> list[str]:
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return [ast.unparse(s) for s in fn.body]


def test_the_wait_opens_the_kernels_body_after_its_docstring():
    source = ROWSUM_SOURCE.format(name="k").replace(
        "    pid = tl.program_id(0)", '    """rowsum over [rows, cols]; writes out"""\n    pid = tl.program_id(0)')
    got = grid_dependency_source(source, "k")
    body = _body(got, "k")
    assert body[0].startswith("'rowsum over"), "the docstring stays the function's docstring"
    assert body[1:2] == list(GRID_DEPENDENCY)
    assert body[2:] == _body(source, "k")[1:], "the rest of the body is unchanged"


def test_a_kernel_without_docstring_and_a_multiline_signature():
    source = ADD_SOURCE.format(name="pipec_add_0").replace("in_ptr1, out_ptr0,", "in_ptr1,\n        out_ptr0,")
    body = _body(grid_dependency_source(source, "pipec_add_0"), "pipec_add_0")
    assert body[:1] == list(GRID_DEPENDENCY)
    assert body[1:] == _body(source, "pipec_add_0")


def test_only_the_named_triton_kernel_changes():
    helper = "@triton.jit\ndef helper(x):\n    return x + 1\n\n\n"
    source = ADD_SOURCE.format(name="main").replace("@triton.jit\ndef main", helper + "@triton.jit\ndef main")
    got = grid_dependency_source(source, "main")
    assert _body(got, "helper") == ["return x + 1"]
    assert _body(got, "main")[:1] == list(GRID_DEPENDENCY)


def test_gluon_and_unknown_kernels_are_loaded_as_written():
    assert grid_dependency_source(GLUON_SOURCE, "k") is None
    assert grid_dependency_source(ADD_SOURCE.format(name="a"), "b") is None


def test_no_pdl_without_graphs_or_off_by_option():
    if not torch.cuda.is_available():
        pytest.skip("the runner's PDL is CUDA-only; on the CPU every load is the plain one")
    prog = _chain_program(4, 256)
    launch = load_launch(prog, CompileOptions(runtime="launch"))
    off = load_cudagraph(prog, CompileOptions(runtime="cudagraph").with_extra(pdl=False))
    for run in (launch, off):
        run([torch.randn(256, device="cuda"), torch.randn(256, device="cuda")])
        assert not any("launch_pdl" in s.kwargs for s in _launch_steps(run))


def _chain_program(length: int, n: int) -> Program:
    """out_k = out_{k-1} + y: each kernel reads what the one ahead wrote; the intermediate
    buffers die as they are read, so the memory plan reuses their slots (a write over memory
    a kernel two launches back read)."""
    kernels = tuple(add_kernel(f"pipec_add_{k}", n) for k in range(length))
    names = ["x"] + [f"t{k}" for k in range(length)]
    steps = tuple(Step("launch", f"pipec_add_{k}", (names[k], "y"), (names[k + 1],)) for k in range(length))
    return Program(name="chain", inputs=(Buffer("x", T([n])), Buffer("y", T([n]))), outputs=(names[-1],),
                   buffers=tuple(Buffer(v, T([n])) for v in names[1:]), kernels=kernels, steps=steps)


def _launch_steps(run) -> list:
    runner = getattr(run, "runner", run)
    return [s for plan in runner.plans.values() for s, _ in plan if isinstance(s, LaunchStep)]


@pytest.mark.skipif(not (torch.cuda.is_available() and pdl_supported(torch.cuda.current_device())),
                    reason="needs a CUDA GPU of sm_90 or newer")
def test_a_chain_of_dependent_kernels_replays_with_pdl_as_launched_without():
    prog = _chain_program(40, 1 << 20)  # 4 MiB a buffer: many programs, so a kernel that ran early would show
    launch = load_launch(prog, CompileOptions(runtime="launch"))
    graph = load_cudagraph(prog, CompileOptions(runtime="cudagraph"))  # on by default
    torch.manual_seed(0)
    for _ in range(4):
        inputs = [torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")]
        want = launch(inputs)[0]
        got = graph(inputs)[0]
        assert torch.equal(want, got)
    assert graph.graphs, "no graph was captured"
    assert all(s.kwargs.get("launch_pdl") for s in _launch_steps(graph))


def test_pdl_is_off_on_rocm_and_before_sm90(monkeypatch):
    """ROCm reports MI300 as capability 9.4 through torch.cuda, and its Triton has no grid
    dependency control: no kernel may be loaded with the wait there, nor below sm_90."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for hip, capability, want in (("6.2", (9, 4), False), (None, (8, 0), False)):
        pdl_supported.cache_clear()
        monkeypatch.setattr(torch.version, "hip", hip)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index, c=capability: c)
        assert pdl_supported(0) is want
    pdl_supported.cache_clear()
