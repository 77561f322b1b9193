"""The launch store (launch_store.py): a kernel launched through torch's C++ launcher is recorded
with its cubin, under a key naming everything the cubin was specialized for; a later process
launches the record without Triton. On the CPU with a pretend C++ launcher and GPU; the GPU
test (tests/test_static_launch.py) runs a model from the store in a new process."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace

import pytest
import torch

from pipec_runtime_cudagraph import launch_store
from pipec_runtime_cudagraph.launch_store import LaunchStore


class FakeLauncher:
    """torch._C._StaticCudaLauncher's two calls, recorded."""

    def __init__(self):
        self.loads, self.launches = [], []

    def _load_kernel(self, path, name, shared, device):
        with open(path, "rb") as f:
            self.loads.append((f.read(), name, shared, device))
        return ("module", 1000 + len(self.loads), 32, 0)

    def _launch_kernel(self, *args):
        self.launches.append(args)


@pytest.fixture
def pretend_gpu(monkeypatch):
    impl = FakeLauncher()
    monkeypatch.setattr(torch._C, "_StaticCudaLauncher", impl, raising=False)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (9, 0))
    return impl


def compiled_kernel(cubin=b"\x7fELF pretend cubin", scratch=0):
    """What Triton's `fn[grid](x, out, n, BLOCK=...)` returns, as far as the store reads it;
    `scratch`: global scratch bytes per program (a kernel making TMA descriptors on the device)."""
    fn = SimpleNamespace(arg_names=["x", "out", "n", "BLOCK"])
    src = SimpleNamespace(fn=fn, signature={"x": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                          constants={})
    meta = SimpleNamespace(num_ctas=1, cluster_dims=(1, 1, 1), num_warps=4, shared=0, name="pipec_k",
                           global_scratch_size=scratch, global_scratch_align=128, profile_scratch_size=0)
    return SimpleNamespace(asm={"cubin": cubin}, src=src, metadata=meta)


class Ptr:
    def __init__(self, address, dtype=torch.float32):
        self.address, self.dtype = address, dtype

    def data_ptr(self):
        return self.address


GPU = torch.device("cuda", 0)
VALUES = ("p0", "p1", 1000, 256)  # x, out, n, BLOCK: what the launch passed, in signature order


def test_a_recorded_launch_runs_from_its_cubin_in_a_new_process(pretend_gpu, tmp_path):
    store = LaunchStore(tmp_path)
    ptrs = [Ptr(1024), Ptr(2048)]
    key = store.key("body", {"BLOCK": 256, "num_warps": 4, "num_stages": 2}, (1000,), ptrs, GPU)
    assert store.get(key) is None
    assert store.put(key, compiled_kernel(), VALUES, 2)
    record = json.loads((tmp_path / f"{key}.json").read_text())
    assert record["name"] == "pipec_k" and record["args"] == "(p0.data_ptr(), p1.data_ptr(), 1000, 0, 0)"  # null scratch pointers

    later = LaunchStore(tmp_path)  # a new process: nothing remembered but the files
    stored = later.get(key)
    assert stored is not None
    launch = stored.launcher((4,), 2, 0)
    assert stored.launcher((4,), 2, 0) is launch  # bound once per grid and device
    launch("STREAM", *ptrs)
    assert pretend_gpu.loads == [(b"\x7fELF pretend cubin", "pipec_k", 0, 0)]
    assert pretend_gpu.launches == [(1001, 4, 1, 1, 4, 0, "OOiOO", (1024, 2048, 1000, 0, 0), "STREAM")]


def test_a_kernel_with_global_scratch_gets_its_own_per_launch(pretend_gpu, tmp_path, monkeypatch):
    """A TMA kernel makes its descriptors in global scratch: the record keeps the bytes per
    program, and each launch of it allocates that times its grid's programs (Triton's launcher
    does the same through tma.py's allocator) and passes the allocation; the profile scratch
    pointer stays null."""
    from pipec_runtime_cudagraph import static_launch

    allocated = []

    def scratch(size):
        allocated.append(size)
        return Ptr(65536 * len(allocated))
    monkeypatch.setattr(static_launch, "scratch_memory", scratch)
    store = LaunchStore(tmp_path)
    ptrs = [Ptr(1024), Ptr(2048)]
    key = store.key("tma body", {"BLOCK": 256, "num_warps": 4, "num_stages": 2}, (1000,), ptrs, GPU)
    assert store.put(key, compiled_kernel(scratch=256), VALUES, 2)
    stored = LaunchStore(tmp_path).get(key)
    launch = stored.launcher((3, 2), 2, 0)
    launch("STREAM", *ptrs)
    launch("STREAM", *ptrs)
    assert allocated == [256 * 6, 256 * 6]  # fresh each launch: 6 programs' worth
    assert [call[7] for call in pretend_gpu.launches] == [(1024, 2048, 1000, 65536, 0), (1024, 2048, 1000, 131072, 0)]


def test_the_key_names_everything_the_cubin_was_specialized_for(pretend_gpu, tmp_path, monkeypatch):
    store = LaunchStore(tmp_path)
    kwargs = {"BLOCK": 256, "num_warps": 4, "num_stages": 2}
    ptrs = [Ptr(1024), Ptr(2048)]
    base = store.key("body", kwargs, (1000,), ptrs, GPU)
    assert store.key("body", dict(reversed(kwargs.items())), (1000,), [Ptr(4096), Ptr(64)], GPU) == base
    others = [
        store.key("other body", kwargs, (1000,), ptrs, GPU),
        store.key("body", {**kwargs, "num_warps": 8}, (1000,), ptrs, GPU),
        store.key("body", kwargs, (1001,), ptrs, GPU),
        store.key("body", kwargs, (1000,), [Ptr(1024, torch.bfloat16), Ptr(2048)], GPU),
        store.key("body", kwargs, (1000,), [Ptr(1028), Ptr(2048)], GPU),  # misaligned: Triton specialized on 16
    ]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (10, 0))
    others.append(LaunchStore(tmp_path).key("body", kwargs, (1000,), ptrs, GPU))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    others.append(LaunchStore(tmp_path).key("body", kwargs, (1000,), ptrs, GPU))
    assert len({base, *others}) == len(others) + 1


def test_what_the_store_cannot_replay_is_not_recorded(pretend_gpu, tmp_path):
    store = LaunchStore(tmp_path)
    clustered = compiled_kernel()
    clustered.metadata.cluster_dims = (2, 1, 1)
    assert not store.put("a" * 64, clustered, VALUES, 2)
    # an argument that is no literal (an infinite scalar) would need the launch's own constants
    scalar = compiled_kernel()
    scalar.src.signature = {"x": "*fp32", "out": "*fp32", "n": "fp32", "BLOCK": "constexpr"}
    assert not store.put("b" * 64, scalar, ("p0", "p1", float("inf"), 256), 2)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("damage", ["no cubin", "bad json", "other format"])
def test_a_damaged_record_is_not_launched(pretend_gpu, tmp_path, damage):
    store = LaunchStore(tmp_path)
    key = "c" * 64
    assert store.put(key, compiled_kernel(), VALUES, 2)
    if damage == "no cubin":
        (tmp_path / f"{key}.cubin").unlink()
    elif damage == "bad json":
        (tmp_path / f"{key}.json").write_text("{")
    else:
        (tmp_path / f"{key}.json").write_text(json.dumps({**json.loads((tmp_path / f"{key}.json").read_text()),
                                                          "format": launch_store.FORMAT + 1}))
    assert LaunchStore(tmp_path).get(key) is None


@pytest.mark.parametrize("dynamic", [False, True])
def test_only_launches_of_static_sizes_are_looked_up_and_recorded(pretend_gpu, tmp_path, dynamic):
    """A record holds one size: a launch whose sizes are symbolic (a generation loop's growing
    length) is never looked up, so never recorded, and keeps Triton, which compiles it once."""
    from runtime_helpers import add_program, dynamic_add_program

    from pipec_runtime_cudagraph import load_launch
    from pipec_runtime_cudagraph.steps import LaunchStep

    runner = load_launch(dynamic_add_program() if dynamic else add_program(100))
    runner.launch_store = LaunchStore(tmp_path)
    (plan,) = runner.plans.values()  # keyed by the device it runs on: "cpu", or "cuda" on the GPU machine
    launch = next(s for s, _ in plan if isinstance(s, LaunchStep))
    launch.interpret = False  # as on the GPU
    ptrs = [Ptr(1024), Ptr(2048), Ptr(4096)]
    stored, key = launch.stored(ptrs, (100,), GPU)
    assert stored is None
    assert (key is None) == dynamic


def test_a_record_whose_cubin_does_not_load_is_forgotten_and_written_again(pretend_gpu, tmp_path, monkeypatch):
    store = LaunchStore(tmp_path)
    key = "d" * 64
    assert store.put(key, compiled_kernel(b"damaged"), VALUES, 2)
    later = LaunchStore(tmp_path)
    stored = later.get(key)

    def refuses(*args):
        raise RuntimeError("CUDA_ERROR_INVALID_IMAGE")
    monkeypatch.setattr(pretend_gpu, "_load_kernel", refuses)
    assert not later.loads(key, stored, 0)
    assert later.get(key) is None  # the launch goes through Triton, which compiles it again
    assert later.put(key, compiled_kernel(b"\x7fELF fresh"), VALUES, 2)
    assert (tmp_path / f"{key}.cubin").read_bytes() == b"\x7fELF fresh"
