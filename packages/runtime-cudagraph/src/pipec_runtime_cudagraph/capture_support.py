"""What the `cudagraph` runtime needs around a capture: pipec's own capture stream per device,
the graph's memory pool held and its warm-up allocating from it, PyTorch's cached cuBLAS
workspaces cleared, the RNG state kept, and recovery after a failed capture (cudagraph.py's
module docstring says why each)."""

from __future__ import annotations

import contextlib
import warnings

import torch

# device index -> the stream pipec warms up and captures on
_CAPTURE_STREAMS: dict[int, torch.cuda.Stream] = {}


def capture_stream(device: torch.device) -> torch.cuda.Stream:
    """pipec's own warm-up and capture stream on `device` (see the module docstring)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = _CAPTURE_STREAMS.get(index)
    if stream is None:
        stream = _CAPTURE_STREAMS[index] = torch.cuda.Stream(device=index)
    return stream


def _pool_hooks() -> tuple | None:
    """The caching allocator's hooks that route a thread's allocations to a CUDA Graph memory pool
    (begin, end, release: what Inductor's CUDA Graph trees warm up with), or None where this
    torch lacks them."""
    names = ("_cuda_beginAllocateCurrentThreadToPool", "_cuda_endAllocateToPool", "_cuda_releasePool")
    hooks = tuple(getattr(torch._C, name, None) for name in names)
    return None if None in hooks else hooks


@contextlib.contextmanager
def pool_held(device: torch.device, pool):
    """A reference to the CUDA Graph memory pool `pool` (made if new) for the block, which gets
    `route`: a context manager in which this thread's allocations on `device` come from that pool
    (a capture of the pool takes a reference of its own). The pool must stay referenced from the
    warm-up until the capture begins: the allocator refuses to begin a capture in a pool whose
    references all went. Where torch lacks the hooks, `route` routes nothing: the warm-up then
    allocates in the caller's memory."""
    hooks = _pool_hooks()
    if hooks is None:
        yield contextlib.nullcontext
        return
    begin, end, release = hooks
    index = device.index if device.index is not None else torch.cuda.current_device()
    begin(index, pool)  # a reference, routing nothing yet
    end(index, pool)

    @contextlib.contextmanager
    def route():
        begin(index, pool)
        try:
            yield
        finally:
            end(index, pool)
            release(index, pool)

    try:
        yield route
    finally:
        release(index, pool)


def clear_cublas_workspaces() -> None:
    """Drop PyTorch's cached cuBLAS/cuBLASLt workspaces (each is allocated again at its next use)."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


@contextlib.contextmanager
def preserved_rng(device: torch.device):
    """The CPU and `device`'s CUDA generator states, restored on exit."""
    cpu, cuda = torch.random.get_rng_state(), torch.cuda.get_rng_state(device)
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        torch.cuda.set_rng_state(cuda, device)


def recover_from_failed_capture(device) -> None:
    """A capture that raised leaves the CUDA RNG generators in capture mode (every later
    `torch.randn` on CUDA fails: "Offset increment outside graph capture"); one empty
    capture runs their epilogue again."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "The CUDA Graph is empty"
        try:
            with torch.cuda.device(device):
                torch.cuda.synchronize()
                with torch.cuda.graph(torch.cuda.CUDAGraph()):
                    pass
        except Exception:  # noqa: BLE001 - best effort
            pass
