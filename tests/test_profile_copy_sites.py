"""benchmarks/profile_kernels.py --copies: where each ATen copy of a call comes from (the copies a
kernel profile names only `direct_copy_kernel`), with shapes and the Python stack above torch."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from profile_kernels import copy_sites  # noqa: E402


def permuted_then_copied(x):
    return x.transpose(0, 1).contiguous() * 2


def test_copy_sites_name_the_caller_and_shape():
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(8, 4)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        for _ in range(3):
            permuted_then_copied(x)
            x.contiguous()  # already contiguous: no copy made, and none reported as one
    sites = copy_sites(prof.events(), calls=3)
    made = [s for s in sites if s["op"] == "aten::contiguous"]
    assert made and all(s["calls"] == 1 for s in made)
    assert any("permuted_then_copied" in frame for s in made for frame in s["stack"])
    assert any("[4, 8]" in s["shapes"] for s in made)


def test_copy_sites_fall_back_to_the_ops_own_stack():
    """With CUDA activity on, the Python function events may not be the copy's parents (the
    GPU runs showed empty stacks): the op's recorded stack names the frames then."""
    from types import SimpleNamespace

    copy = SimpleNamespace(name="aten::copy_", input_shapes=[[4, 8], [4, 8]], cpu_parent=None,
                           stack=["torch/_tensor.py(10): contiguous", "model.py(7): forward", "run.py(3): main"])
    sites = copy_sites([copy, copy], calls=2)
    assert sites == [{"op": "aten::copy_", "shapes": "[[4, 8], [4, 8]]",
                      "stack": ["model.py(7): forward", "run.py(3): main"], "calls": 1.0}]
