"""What the `cudagraph` runtime needs around a capture: pipec's own capture stream per device,
PyTorch's cached cuBLAS workspaces cleared, the RNG state kept, and recovery after a failed
capture (cudagraph.py's module docstring says why each)."""

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
