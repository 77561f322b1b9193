"""A float64 run of a model, the judge when a low-precision output differs from eager's.

Eager PyTorch is not exact either: a bf16 LayerNorm weight gradient sums 64 rows of
magnitude ~28 in bf16, and eager's sum is further from the true value than pipec's
(fp32-accumulated) one, yet the two differ by more than bf16's tolerance. So an output
outside the dtype's tolerances passes when pipec's error against a float64 run of the same
model is within 1.5x eager's own error plus REFERENCE_SLACK (the rule of the OpInfo harness,
tests/opinfo/opinfo_harness.py).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

# what an output outside the tolerances may lose to float64 beyond 1.5x eager's own loss
# (the OpInfo harness's values); float64 and other dtypes are judged against eager alone
REFERENCE_SLACK = {torch.float16: 1e-3, torch.bfloat16: 1e-3, torch.float32: 1e-5}


@dataclass(frozen=True)
class Float64Run:
    outputs: Any
    gradients: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]


def no_grad_call(fn, inputs):
    """`fn(*inputs)` without autograd: the `run` of lazy_float64_run for an inference call."""
    with torch.no_grad():
        return fn(*inputs)


def lazy_float64_run(model, example_inputs, run: Callable) -> Callable[[], Float64Run | None]:
    """A function returning `run(float64 copy of model, float64 copies of the inputs)` with the
    copy's gradients and buffers, computed on its first call only; None when the model has no
    float64 run (not an nn.Module, or it raises in float64: ops without float64 kernels).

    Call this before the eager run: it records what that run starts from (the RNG state, the
    buffers and gradients a training step changes), so the float64 run starts there too."""
    if not isinstance(model, torch.nn.Module):  # a function's tensors cannot be converted
        return lambda: None
    start = _snapshot(model)

    @functools.cache
    def float64_run():
        try:
            return _run_float64(model, example_inputs, run, start)
        except Exception:  # noqa: BLE001 - no float64 run: the comparison with eager stands
            return None

    return float64_run


def _snapshot(model) -> dict:
    return {
        "rng": torch.random.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
        "buffers": {n: b.detach().clone() for n, b in model.named_buffers()},
        "grads": {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()},
    }


def _run_float64(model, example_inputs, run: Callable, start: dict) -> Float64Run:
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for n, b in twin.named_buffers():
            b.copy_(start["buffers"][n])
    for n, p in twin.named_parameters():
        p.grad = start["grads"][n]
    twin = twin.to(torch.float64)  # converts the gradients too
    inputs = tree_map(_to_float64, tuple(example_inputs))
    cuda = start["cuda_rng"]
    with torch.random.fork_rng(devices=range(len(cuda)) if cuda else []):  # the caller's RNG moves on untouched
        torch.random.set_rng_state(start["rng"])
        if cuda:
            torch.cuda.set_rng_state_all(cuda)
        outputs = run(twin, inputs)
    return Float64Run(outputs, {n: p.grad for n, p in twin.named_parameters() if p.grad is not None},
                      dict(twin.named_buffers()))


def _to_float64(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().to(torch.float64).requires_grad_(x.requires_grad)
    return x


def flat_reference(reference: Callable[[], Any] | None, count: int) -> Callable[[], list | None]:
    """`reference()` flattened like the outputs it judges, computed once; None when there is
    none or it does not have `count` leaves."""
    @functools.cache
    def flat():
        exact = reference() if reference is not None else None
        leaves = tree_flatten(exact)[0] if exact is not None else None
        return leaves if leaves is not None and len(leaves) == count else None
    return flat


def errors_against_float64(actual, expected, exact) -> tuple[float, float] | None:
    """(pipec's, eager's) max abs error against the float64 result `exact`; None when that
    cannot judge them (a dtype without a slack, or `exact` is no float64 tensor of their shape)."""
    if (expected.dtype not in REFERENCE_SLACK or not isinstance(exact, torch.Tensor)
            or exact.dtype != torch.float64 or exact.shape != expected.shape):
        return None
    # NaN where float64 has a number is as far off as it gets
    return max_abs_difference(actual, exact, math.inf), max_abs_difference(expected, exact, math.inf)


def close_enough(ours: float, eagers: float, dtype) -> bool:
    """pipec lost at most 1.5x what eager lost (plus the dtype's slack), and is finite where
    float64 is: a reference that is itself NaN somewhere makes both errors inf, which proves nothing."""
    return math.isfinite(ours) and ours <= 1.5 * eagers + REFERENCE_SLACK[dtype]


def max_abs_difference(x, y, other_nan: float) -> float:
    """max |x - y| in float64 on y's device; equal values (infinities too) and NaN against NaN
    count 0, any other NaN counts `other_nan`."""
    if not y.numel():
        return 0.0
    x64 = x.detach().to(y.device, torch.float64)
    y64 = y.detach().to(torch.float64)
    d = (x64 - y64).abs()
    same = (x64 == y64) | (torch.isnan(x64) & torch.isnan(y64))
    d = torch.where(same, torch.zeros_like(d), d)
    return float(torch.nan_to_num(d, nan=other_nan).max())
