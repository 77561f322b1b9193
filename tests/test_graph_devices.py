"""A graph's tensors stay on the devices Dynamo gave them (pipec/graph_devices.py).

The GPU tests fail on the code before graph_devices.py: a graph whose only inputs were sizes ran
in Triton's CPU interpreter and returned CUDA values on the CPU (the fuzzer's seed 607 on the
H200: "index is on cpu" from an extern gather in the next graph), a graph reading only a CPU
scalar computed on the CPU, and a CPU tensor made beside CUDA work came back on the GPU. The
CPU tests check the wrapper's moves with the meta device standing in for a GPU (a meta tensor
cannot be copied back: the CPU-bound output is checked on the GPU only)."""

import sys
from pathlib import Path

import pytest
import torch

import pipec
from pipec.graph_devices import compute_device, on_graph_devices

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
TOL = {"atol": 1e-5, "rtol": 1e-5}


def _graph(fn, *args):
    """An fx graph of `fn` with each node's `val` recorded as Dynamo/AOTAutograd record it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*args)


def test_a_graph_on_one_device_is_not_wrapped():
    gm = _graph(lambda x: (x * 2,), torch.ones(3))
    run = lambda args: [args[0] * 2]  # noqa: E731
    assert compute_device(gm) == torch.device("cpu")
    assert on_graph_devices(run, gm, [torch.ones(3)], compute_device(gm)) is run


def test_cpu_inputs_move_to_the_device_the_graph_computes_on():
    # a CPU scalar input beside work made on another device (meta stands in for the GPU)
    gm = _graph(lambda s: (torch.arange(4, device="meta") * s,), torch.tensor(2.0))
    assert compute_device(gm) == torch.device("meta")
    seen = []

    def run(args):  # the runtime: works where its inputs are
        seen.append(args[0].device)
        return [torch.empty(4, device=args[0].device)]

    wrapped = on_graph_devices(run, gm, [torch.tensor(2.0)], compute_device(gm))
    (out,) = wrapped([torch.tensor(2.0)])
    assert seen == [torch.device("meta")] and out.device == torch.device("meta")


def test_a_graph_without_inputs_returns_its_outputs_where_it_made_them():
    gm = _graph(lambda: (torch.arange(3, device="meta") * 2,))

    def run(args):  # a runtime whose default device is another one
        return [torch.zeros(3)]

    (out,) = on_graph_devices(run, gm, [], compute_device(gm))([])
    assert out.device.type == "meta"


# ---------------------------------------------------------------- on the GPU


@gpu
def test_a_graph_of_sizes_only_runs_on_the_gpu():
    def f(x):
        n = x.shape[0]
        torch._dynamo.graph_break()
        index = (torch.arange(n, device="cuda") * 3 + 1) % n  # a graph whose only input is n
        torch._dynamo.graph_break()
        return x.gather(0, index)

    compiled = pipec.compile(f, dynamic=True, cache="none")
    for n in (5, 7):
        x = torch.randn(n, device="cuda")
        torch.testing.assert_close(compiled(x), f(x), **TOL)


@gpu
def test_a_graph_reading_only_a_cpu_scalar_computes_on_the_gpu():
    def f(s):
        return torch.arange(8, device="cuda", dtype=torch.float32) * s + 1

    s = torch.tensor(3.0)
    got = pipec.compile(f, cache="none")(s)
    assert got.device.type == "cuda"
    torch.testing.assert_close(got, f(s), **TOL)


@gpu
def test_a_cpu_tensor_made_beside_gpu_work_stays_on_the_cpu():
    def f(x):
        return x.sin() + 1, torch.arange(4) * 2

    x = torch.randn(16, device="cuda")
    a, b = pipec.compile(f, cache="none")(x)
    assert (a.device.type, b.device.type) == ("cuda", "cpu")
    want = f(x)
    torch.testing.assert_close(a, want[0], **TOL)
    torch.testing.assert_close(b, want[1])


@gpu
def test_fuzz_seed_607_program():
    """The fuzzer's program (H200, seed 607) whose index graph ran on the CPU."""
    sys.path.insert(0, str(Path(__file__).parent))
    from fuzz_graphs import Program, Step
    from fuzz_pipeline import check_program

    steps = (Step("amax", (2,), (0, True)), Step("const", (3,), ("add", 0, (1.5,))), Step("gather", (1,), (1, 0, 1, 5)),
             Step("slice", (1,), (1, 4, 1)), Step("permute", (6,), (0, 1)), Step("permute", (7,), (0, 1)),
             Step("gather", (8,), (1, 0, 0, 1)), Step("abs", (0,)), Step("silu", (10,)), Step("abs", (0,)))
    prog = Program(input_shapes=((2, 12), (2, 12), (12,)), steps=steps, outputs=(12,), dtype="float16",
                   sizes=(((5, 12), (5, 12), (12,)),), dynamo=True, policies=("aggressive",))
    check_program(prog, device="cuda")
