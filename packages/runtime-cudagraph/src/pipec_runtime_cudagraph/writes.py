"""Writes to inputs (Program.writes, IR 1.7): after a run, each written input holds its value.

Codegen has the launch computing a written value store it into the input itself where that is
safe (its `inplace` names the input; the runtime binds the output to the input's tensor, as it
binds an output written over a library result). Then nothing is left to do. Otherwise (the
value made by a reduction or a library call, the input read after the value is computed, an
input the run copied because it was not contiguous or not on the GPU) the value is copied
into the caller's tensor here, as AOTAutograd's epilogue would have.
"""

from __future__ import annotations

import torch


def written_inputs(write_index, inputs) -> list:
    """The caller's tensors that the run writes, taken before `prepare` copies any (and before an
    owned input list is cleared)."""
    return [inputs[k] for k, _ in write_index]


def apply_writes(write_index, originals, vals) -> None:
    """Each written input's value into the caller's tensor, where a launch did not store it there."""
    for (_, value_index), original in zip(write_index, originals):
        value = vals[value_index]
        if not holds(original, value):
            # detached: a parameter is a leaf that requires grad, and the write is no autograd op
            original.detach().copy_(value)


def holds(original: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether `value` is `original`'s memory (the launch wrote it in place)."""
    return (value.device == original.device and value.data_ptr() == original.data_ptr()
            and value.shape == original.shape and value.stride() == original.stride())
