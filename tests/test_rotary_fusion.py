"""Rotary embeddings compile to one kernel per rotated tensor (capture `cat_parts.py`, fusion's
op count without literals and iotas): transformers' rotate_half and a partial rotary's outer cat
used to cost two kernels each, one writing `-x2` or the rotated dims for the next to gather."""

from __future__ import annotations

import torch

import pipec


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(q, k, cos, sin):
    """Llama's apply_rotary_pos_emb on queries and keys of a projection."""
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def partial_rotary(q, cos, sin):
    """GPT-NeoX's and Phi's: the first dims rotated, the rest passed through."""
    rot = cos.shape[-1]
    q_rot, q_pass = q[..., :rot], q[..., rot:]
    return torch.cat([q_rot * cos + rotate_half(q_rot) * sin, q_pass], dim=-1)


def _launches(dump_dir) -> list[str]:
    (text,) = [p.read_text() for p in dump_dir.glob("*.codegen.txt")]
    return [line.strip() for line in text.splitlines() if " = launch " in line]


def test_rotary_embedding_is_one_kernel_per_tensor(tmp_path):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 8, 16, generator=g), torch.randn(2, 2, 8, 16, generator=g)
    cos, sin = torch.randn(1, 1, 8, 16, generator=g), torch.randn(1, 1, 8, 16, generator=g)
    # the fusion under test: each tensor one kernel (combo kernels would launch the two together)
    compiled = pipec.compile(rotary, dump_dir=str(tmp_path), cache="none", combo_kernels=False)
    for got, want in zip(compiled(q, k, cos, sin), rotary(q, k, cos, sin)):
        torch.testing.assert_close(got, want)
    assert len(_launches(tmp_path)) == 2, _launches(tmp_path)


def test_partial_rotary_embedding_is_one_kernel(tmp_path):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 8, 32, generator=g)
    cos, sin = torch.randn(1, 1, 8, 16, generator=g), torch.randn(1, 1, 8, 16, generator=g)
    compiled = pipec.compile(partial_rotary, dump_dir=str(tmp_path), cache="none")
    torch.testing.assert_close(compiled(q, cos, sin), partial_rotary(q, cos, sin))
    assert len(_launches(tmp_path)) == 1, _launches(tmp_path)


def test_partial_rotary_trains_as_eager():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 8, 32, generator=g, requires_grad=True)
    cos, sin = torch.randn(1, 1, 8, 16, generator=g), torch.randn(1, 1, 8, 16, generator=g)
    q_ref = q.detach().clone().requires_grad_()
    compiled = pipec.compile(partial_rotary, cache="none")
    compiled(q, cos, sin).square().sum().backward()
    partial_rotary(q_ref, cos, sin).square().sum().backward()
    torch.testing.assert_close(q.grad, q_ref.grad)


def test_gathered_loads_read_coordinates_not_a_flattened_position(tmp_path):
    """codegen `indexing_ops.py`: a cat's gathers load at their coordinates (a clamped one along
    the cat dim, the kernel's own elsewhere) instead of dividing a flat int64 position back into
    coordinates; the address of every gathering load is free of `//` and `%` on a computed value."""
    import re

    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 8, 32, generator=g)
    cos, sin = torch.randn(1, 1, 8, 16, generator=g), torch.randn(1, 1, 8, 16, generator=g)
    compiled = pipec.compile(partial_rotary, dump_dir=str(tmp_path), cache="none")
    torch.testing.assert_close(compiled(q, cos, sin), partial_rotary(q, cos, sin))
    (text,) = [p.read_text() for p in tmp_path.glob("*.codegen.txt")]
    gathers = [line for line in text.splitlines() if "tl.load(" in line and re.search(r"\+ \(.*tmp\d+", line)]
    assert gathers, text
    for line in gathers:
        assert not re.search(r"tmp\d+\)? *(//|%)", line), line


def test_a_gather_of_one_element_picked_by_sizes_loads_a_block(tmp_path):
    """`cat([x[-1:].expand(3), y])` under dynamic shapes: the gathered element's offset is a size
    expression alone (`s0 - 1`), the same for every lane; the load is still a block (a scalar
    pointer with a block mask does not compile in Triton), and the result is right at two sizes."""
    def last_then_rest(x, y):
        return torch.cat([x[-1:].expand(3), y]) * 2

    compiled = pipec.compile(last_then_rest, dynamic=True, cache="none", dump_dir=str(tmp_path))
    for n in (5, 7):
        x, y = torch.randn(n), torch.randn(n + 1)
        torch.testing.assert_close(compiled(x, y), last_then_rest(x, y))
    loads = [line for p in tmp_path.glob("*.codegen.txt") for line in p.read_text().splitlines() if "tl.load(" in line]
    lone = [line for line in loads if "- 1" in line]
    assert lone and all("zeros_like" in line for line in lone), loads
