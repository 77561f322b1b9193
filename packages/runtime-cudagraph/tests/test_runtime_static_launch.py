"""Launches through torch's C++ launcher (static_launch.py): which kernels it can describe, and on
the GPU that its launches compute what Triton's launcher does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from runtime_helpers import add_program, slot_program

from pipec_ir import CompileOptions
from pipec_runtime_cudagraph import load_launch, static_launch
from pipec_runtime_cudagraph.static_launch import argument_codes, describable

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture()
def launch_paths(monkeypatch):
    """How many launchers were bound through the C++ launcher ("static") and Triton's ("triton")."""
    from pipec_runtime_cudagraph import fastlaunch

    paths = {"static": 0, "triton": 0}
    real = fastlaunch.static_launch_call

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        paths["triton" if out is None else "static"] += 1
        return out
    monkeypatch.setattr(fastlaunch, "static_launch_call", counted)
    return paths


def _kernel(signature, constants=None, **metadata):
    fn = SimpleNamespace(arg_names=list(signature))
    src = SimpleNamespace(fn=fn, signature=dict(signature), constants=constants or {})
    meta = {"num_ctas": 1, "cluster_dims": (1, 1, 1), "num_warps": 4, "shared": 0, "name": "k",
            "global_scratch_size": 0, "profile_scratch_size": 0}
    meta.update(metadata)
    return SimpleNamespace(asm={"cubin": b""}, src=src, metadata=SimpleNamespace(**meta))


def test_constexprs_and_specialized_constants_are_not_arguments():
    k = _kernel({"in_ptr0": "*bf16", "out_ptr0": "*fp32", "xnumel": "i32", "rnumel": "constexpr",
                 "scale": "fp32", "big": "i64", "XBLOCK": "constexpr"}, constants={(4,): 2.0})
    assert argument_codes(k) == ("OOil", (0, 1, 2, 5))
    assert describable(k) is None


def test_string_keyed_constants_are_dropped_too():
    k = _kernel({"p": "*fp16", "n": "i32", "flag": "i1"}, constants={"n": 1})
    assert argument_codes(k) == ("Oi", (0, 2))


@pytest.mark.parametrize(("change", "why"), [
    ({"num_ctas": 2}, "several CTAs per program"),
    ({"cluster_dims": (2, 1, 1)}, "a cluster launch"),
    ({"launch_pdl": True}, "launch_pdl"),
    ({"launch_cooperative_grid": True}, "launch_cooperative_grid"),
    ({"tensordesc_meta": [{"block": 64}]}, "tensor descriptors"),
    ({"profile_scratch_size": 64}, "profile_scratch_size"),
    ({"global_scratch_size": 128, "global_scratch_align": 1024}, "global scratch aligned past the caching allocator's 512 bytes"),
])
def test_kernels_it_cannot_describe_keep_tritons_launcher(change, why):
    assert describable(_kernel({"p": "*fp32"}, **change)) == why


def test_a_kernel_making_tma_descriptors_on_the_device_is_describable():
    """What Triton 3.6-3.9 compiles for `tl.make_tensor_descriptor` on sm_90: 256 bytes of global
    scratch per program, aligned to 128, no host descriptors, no cluster dims."""
    k = _kernel({"a": "*fp16", "c": "*fp16", "M": "i32"}, global_scratch_size=256, global_scratch_align=128,
                tensordesc_meta=[], cluster_dims=None)
    assert describable(k) is None


def test_an_argument_type_without_a_code_keeps_tritons_launcher():
    assert argument_codes(_kernel({"desc": "nvTmaDesc", "p": "*fp32"})) is None
    assert describable(SimpleNamespace(asm={"ptx": ""}, src=None, metadata=None)) == "no cubin"


@cuda
@pytest.mark.skipif(static_launch.static_launcher_impl() is None, reason="torch has no C++ Triton launcher")
@pytest.mark.parametrize("program", [add_program(1000), slot_program(33, 300)], ids=["add", "rows"])
def test_gpu_static_launches_compute_what_tritons_launcher_does(program, launch_paths):
    shapes = [tuple(int(d) for d in b.type.shape) for b in program.inputs]
    args = [torch.randn(s, device="cuda") for s in shapes]
    results = {}
    for flag in (False, True):
        # launch_store=False: launches an earlier test recorded in the kernel directory (a shared one
        # on the GPU machine) would be bound from the store, not through static_launch_call
        run = load_launch(program, CompileOptions(runtime="launch").with_extra(static_launch=flag, launch_store=False))
        before = dict(launch_paths)
        run(args)  # compiles; the next call builds the specialized run and binds its launchers
        got = run(args)
        torch.cuda.synchronize()
        took = {k: launch_paths[k] - before[k] for k in before}
        if flag:  # every kernel bound through the C++ launcher
            assert took["static"] >= len(program.kernels) and took["triton"] == 0, took
        else:  # static_launch=False never asks it
            assert took == {"static": 0, "triton": 0}, took
        results[flag] = got
    for a, b in zip(results[False], results[True]):
        assert torch.equal(a, b)


@cuda
@pytest.mark.skipif(static_launch.static_launcher_impl() is None, reason="torch has no C++ Triton launcher")
def test_gpu_a_misaligned_input_still_takes_the_checked_path():
    """A kernel compiled for 16-byte aligned pointers gets a pointer that is not: Triton compiles
    the variant for it, as before the static launcher."""
    run = load_launch(add_program(1000), CompileOptions(runtime="launch").with_extra(static_launch=True))
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    run([x, y])
    run([x, y])
    base = torch.randn(1001, device="cuda")
    shifted = base[1:]
    (out,) = run([shifted, y])
    torch.testing.assert_close(out, shifted + y)


def test_a_kernel_is_loaded_once_per_device(monkeypatch):
    """Every launch of one kernel (its layers, each specialized run) binds the same CUfunction:
    the cubin is loaded once per device, not once per launch."""
    import contextlib

    loads = []

    class Impl:
        @staticmethod
        def _load_kernel(path, name, shared, device):
            with open(path, "rb") as f:
                loads.append((f.read(), name, device))
            return (f"module{len(loads)}", f"function{len(loads)}", 32, 0)

    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    k = _kernel({"p": "*fp32"})
    k.asm["cubin"] = b"\x7fELF cubin"
    assert static_launch.load_function(Impl, k, 0) == static_launch.load_function(Impl, k, 0) == "function1"
    assert static_launch.load_function(Impl, k, 1) == "function2"
    assert loads == [(b"\x7fELF cubin", "k", 0), (b"\x7fELF cubin", "k", 1)]


def _bound(monkeypatch, static: bool, check=()):
    """A launcher bound on a fake compiled kernel: (launch, [recorded calls])."""
    import inspect

    from pipec_runtime_cudagraph import fastlaunch

    calls = []
    kernel = SimpleNamespace(run=lambda *a: calls.append(("triton", a)), function=7, packed_metadata="META")
    fn = SimpleNamespace(arg_names=["x", "out", "n", "BLOCK"], signature=inspect.signature(lambda x, out, n, BLOCK: None))
    if static:
        entries = {"LAUNCH": lambda *a: calls.append(("static", a)), "CUFUNC": 9, "WARPS": 4, "SHARED": 0,
                   "TYS": "OOi", "C": ()}
        monkeypatch.setattr(fastlaunch, "static_launch_call", lambda *a: (entries, "(p0.data_ptr(), p1.data_ptr(), 8)"))
    slow = lambda *ptrs: calls.append(("slow", ptrs))  # noqa: E731
    launch = fastlaunch.bind_launcher(kernel, fn, (2,), (8,), {"BLOCK": 4}, 2, check, slow, 0 if static else None)
    return launch, calls


class _Ptr:
    def __init__(self, address):
        self.address, self.reads = address, 0

    def data_ptr(self):
        self.reads += 1
        return self.address


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("address", [64, 65])
def test_an_inlined_launch_makes_the_call_its_launcher_makes(monkeypatch, static, address):
    """A specialized run writes a bound launch into its own body (`InlineLaunch.statement`): with
    the pointers renamed and the launcher's names made unique there, it makes the same call,
    the alignment check's slow path included."""
    launch, calls = _bound(monkeypatch, static, check=(0,))
    x, out = _Ptr(address), _Ptr(128)
    launch("STREAM", x, out)
    namespace = {"stream": "STREAM", "a": x, "b": out}

    def const(prefix, value):
        name = f"{prefix}_{len(namespace)}"
        namespace[name] = value
        return name
    statement = launch.inline.statement(["a", "b"], const)
    assert "p0" not in statement and "p1" not in statement
    exec(statement, namespace)  # noqa: S102 - the statement under test
    assert len(calls) == 2 and calls[0] == calls[1], calls
    kind = calls[0][0]
    assert kind == ("slow" if address % 16 else "static" if static else "triton")
    if kind == "static":  # the checked address is read once a launch and is what the kernel gets
        assert (address, 128, 8) in calls[0][1] and x.reads == 2 and out.reads == 2, (calls, x.reads)


HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9

if HOPPER:
    import triton
    import triton.language as tl

    @triton.jit
    def _tma_double(a_ptr, c_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        # descriptors made on the device: Triton gives the kernel a global scratch pointer for them
        pid = tl.program_id(0)
        a = tl.make_tensor_descriptor(a_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        c = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        c.store([pid * BM, 0], a.load([pid * BM, 0]) * 2)


@pytest.mark.skipif(not HOPPER or static_launch.static_launcher_impl() is None,
                    reason="device-side TMA descriptors need a Hopper GPU and torch's C++ launcher")
def test_gpu_a_tma_descriptor_kernel_launches_through_torchs_launcher_with_its_scratch(launch_paths):
    """The TMA GEMMs' kind of kernel (descriptors made in global scratch) bound to torch's C++
    launcher: right when launched directly and when replayed from a CUDA Graph, each launch
    with scratch of its own."""
    from pipec_runtime_cudagraph.fastlaunch import bind_launcher
    from pipec_runtime_cudagraph.tma import ensure_allocator

    ensure_allocator()
    torch.manual_seed(0)
    a = torch.randn(1000, 64, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    grid, sizes, constants = (16,), (1000, 64), {"BM": 64, "BN": 64}
    kernel = _tma_double[grid](a, c, *sizes, **constants)
    assert kernel.metadata.global_scratch_size > 0 and describable(kernel) is None
    launch = bind_launcher(kernel, _tma_double, grid, sizes, constants, 2, (), None, a.device.index)
    assert launch_paths == {"static": 1, "triton": 0}
    c.zero_()
    launch(torch.cuda.current_stream().cuda_stream, a, c)
    torch.testing.assert_close(c, a * 2)
    graph = torch.cuda.CUDAGraph()
    b = torch.randn_like(a)
    with torch.cuda.graph(graph):
        launch(torch.cuda.current_stream().cuda_stream, b, c)
    c.zero_()
    graph.replay()
    torch.testing.assert_close(c, b * 2)
