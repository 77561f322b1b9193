"""Launch configs that read through TMA descriptors (docs/IR.md, "Launch configs").

A config with the IR's `TMA_CONSTANT` set makes its tensor descriptors on the device
(`tl.make_tensor_descriptor`): they live in per-launch scratch memory that Triton asks its
allocator for, and the TMA unit faults on a base address that is not 16-byte aligned. So the
runtime sets an allocator before such a kernel runs, and runs `configs[0]` (the pointer
kernel) for a call whose pointers are not aligned.

Such a config is also persistent: its programs stride over the output tiles, so any number of
them is correct. Codegen sizes the grid for an H100/H200's 132 SMs; on a GPU with fewer, the
programs past the SM count would run as a second wave after the first (about twice the time),
so the runtime launches at most one program per SM (`persistent_grid`).
"""

from __future__ import annotations

import torch
from pipec_ir import TMA_CONSTANT

from .fastlaunch import ALIGN_MASK
from .static_launch import scratch_memory


def uses_tma(config) -> bool:
    return bool(dict(config.constants).get(TMA_CONSTANT))


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Triton's allocator protocol: `size` bytes on the current device (`alignment` at most 512,
    which the caching allocator gives; `stream` is the current one)."""
    return scratch_memory(size)


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


_SM_COUNTS: dict[int, int] = {}


def sm_count(device_index: int | None = None) -> int:
    """Streaming multiprocessors of a CUDA device (the current one by default), cached."""
    index = torch.cuda.current_device() if device_index is None else device_index
    count = _SM_COUNTS.get(index)
    if count is None:
        count = _SM_COUNTS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return count


def persistent_grid(grid: tuple, programs: int) -> tuple:
    """`grid` as at most `programs` programs (a 1-D grid when it has to shrink): a persistent
    kernel's programs walk the tiles `num_programs(0) * num_programs(1)` apart from
    `program_id(0) + program_id(1) * num_programs(0)`, so any grid covers every tile."""
    total = 1
    for n in grid:
        total *= n
    return grid if total <= programs else (programs,) + (1,) * (len(grid) - 1)
