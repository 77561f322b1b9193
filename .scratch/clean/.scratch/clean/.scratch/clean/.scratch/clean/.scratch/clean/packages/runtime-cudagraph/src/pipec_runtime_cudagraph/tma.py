"""Launch configs that read through TMA descriptors (docs/IR.md, "Launch configs").

A config with the IR's `TMA_CONSTANT` set makes its tensor descriptors on the device
(`tl.make_tensor_descriptor`): they live in per-launch scratch memory that Triton asks its
allocator for, and the TMA unit faults on a base address that is not 16-byte aligned. So the
runtime sets an allocator before such a kernel runs, and runs `configs[0]` (the pointer
kernel) for a call whose pointers are not aligned.
"""

from __future__ import annotations

import torch
from pipec_ir import TMA_CONSTANT

from .fastlaunch import ALIGN_MASK


def uses_tma(config) -> bool:
    return bool(dict(config.constants).get(TMA_CONSTANT))


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Triton's allocator protocol: `size` bytes on the current device (the caching allocator
    aligns to 512 bytes; inside CUDA Graph capture it allocates from the graph's pool)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_allocator() -> None:
    """Give Triton an allocator unless the caller set one (Triton keeps it per context: set it on
    the thread that runs the program)."""
    import triton

    set_allocator = getattr(triton, "set_allocator", None)
    if set_allocator is None or not torch.cuda.is_available():
        return
    try:
        from triton.runtime import _allocation

        current = _allocation._allocator.get()  # noqa: SLF001 - no public getter
        if not isinstance(current, _allocation.NullAllocator):
            return
    except (ImportError, AttributeError):
        pass
    set_allocator(_scratch)


def misaligned(ptrs, positions) -> bool:
    """Some tensor at `positions` of `ptrs` does not start on a 16-byte boundary."""
    return any(ptrs[j].data_ptr() & ALIGN_MASK for j in positions)
