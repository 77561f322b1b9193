"""The OpInfo sweep: pipec against PyTorch's own op database (see opinfo_harness.py).

Every op_db entry that exercises a Core ATen overload runs its first samples through all of
pipec's stages and is compared with eager; its status must be what opinfo_expectations.py
says (an unexpected pass fails too, so the table stays true). The session prints a summary
line with the counts (conftest.py). The CPU sweep uses float32 and Triton's interpreter;
the GPU sweep (float16/bfloat16) skips without CUDA. `scripts/opinfo_sweep.py` runs every
sample and writes a results JSON.
"""

from __future__ import annotations

import json

import pytest
import torch

import opinfo_expectations
import opinfo_harness as h

CPU_SAMPLES = 2  # samples per entry on CPU: keeps the interpreter sweep within CI's budget
GPU_SAMPLES = 4

CPU_ENTRIES = {h.entry_name(op): op for op in h.entries(torch.float32, "cpu")}


def _check(op, dtype: torch.dtype, device: str, samples: int, record_property):
    result = h.run_entry(op, dtype, device, max_samples=samples)
    if result is None:
        pytest.skip("exercises no Core ATen overload")
    record_property("opinfo", json.dumps({"name": result.name, "status": result.status,
                                          "samples": [{"overloads": list(s.overloads), "status": s.status,
                                                       "externs": [list(e) for e in s.externs]}
                                                      for s in result.samples]}))
    problem = opinfo_expectations.check(result.name, result.status, str(dtype).removeprefix("torch."))
    assert problem is None, f"{problem}\n  detail: {result.detail}"


@pytest.mark.parametrize("name", sorted(CPU_ENTRIES))
def test_opinfo_float32_cpu(name, record_property):
    _check(CPU_ENTRIES[name], torch.float32, "cpu", CPU_SAMPLES, record_property)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the half-precision sweep runs on the GPU machine")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_opinfo_half_gpu(dtype, record_property):
    failures = []
    for op in h.entries(dtype, "cuda"):
        result = h.run_entry(op, dtype, "cuda", max_samples=GPU_SAMPLES)
        if result is None:
            continue
        problem = opinfo_expectations.check(result.name, result.status, str(dtype).removeprefix("torch."))
        if problem:
            failures.append(f"{problem} | {result.detail[:200]}")
    assert not failures, "\n".join(failures)


def test_half_outputs_outside_tolerance_pass_only_when_no_further_from_float64_than_eager():
    exact = torch.tensor([0.3125, 7.0], dtype=torch.float64)
    eager = torch.tensor([0.2500, 7.0], dtype=torch.bfloat16)  # cancellation cost eager 0.0625
    closer = torch.tensor([0.3125, 7.0], dtype=torch.bfloat16)
    farther = torch.tensor([0.4375, 7.0], dtype=torch.bfloat16)
    assert h.compare([closer], [eager], torch.bfloat16) is not None  # outside bf16 tolerance of eager
    assert h.compare([closer], [eager], torch.bfloat16, reference=lambda: [exact]) is None
    assert "further from float64" in h.compare([farther], [eager], torch.bfloat16, reference=lambda: [exact])
    # float32 the same way, with a float32-sized slack
    exact32 = torch.tensor([1.0 + 3e-5, 7.0], dtype=torch.float64)
    eager32 = torch.tensor([1.0, 7.0])  # 3e-5 from float64: outside float32's tolerances of pipec below
    assert h.compare([exact32.float()], [eager32], torch.float32) is not None
    assert h.compare([exact32.float()], [eager32], torch.float32, reference=lambda: [exact32]) is None
    farther32 = torch.tensor([1.0 + 9e-5, 7.0])
    assert "further from float64" in h.compare([farther32], [eager32], torch.float32, reference=lambda: [exact32])


def test_float64_reference_widens_a_dtype_argument_naming_the_half_type():
    # cumsum(x, 1, dtype=bf16) run on float64 inputs would round back to bf16 (on the GPU,
    # after every partial sum): the reference must be float64 all the way
    x = torch.tensor([[256.0, 1.0, 1.0, -256.0]], dtype=torch.bfloat16)
    tensors, spec = h.flatten_sample(type("Sample", (), {"input": x, "args": (1,), "kwargs": {"dtype": torch.bfloat16}}))
    wide = h._call(torch.cumsum, None, [tensors[0].double()], spec, widen=torch.bfloat16)
    assert wide.dtype == torch.float64 and wide[0, -1].item() == 2.0
    narrow = h._call(torch.cumsum, None, [tensors[0].double()], spec)
    assert narrow.dtype == torch.bfloat16


def test_topk_indices_are_checked_by_what_they_select():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0]])
    sample = type("Sample", (), {"args": (2, 1), "kwargs": {}})
    eager = list(torch.topk(x, 2, 1))
    tie = [torch.tensor([[3.0, 3.0]]), torch.tensor([[2, 1]])]  # the other order of the tie
    assert h.topk_problem(tie, eager, x, sample, torch.float32) is None
    wrong_index = [torch.tensor([[3.0, 3.0]]), torch.tensor([[2, 3]])]
    assert "not the input's values" in h.topk_problem(wrong_index, eager, x, sample, torch.float32)
    wrong_value = [torch.tensor([[3.0, 2.0]]), torch.tensor([[1, 3]])]
    assert h.topk_problem(wrong_value, eager, x, sample, torch.float32) is not None
