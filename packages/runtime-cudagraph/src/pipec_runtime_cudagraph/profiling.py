"""pipec's names in `torch.profiler` traces.

- Every call of a loaded program is a `record_function` range `pipec:<graph>` (`graph_range`),
  the graph named as the front end named it (the runtime option `graph_name`: `graph_0`,
  `graph_0_backward`...), else as the Program is.
- On the GPU each kernel is a CUDA kernel named after what it computes (the Triton function is
  the kernel's name, `pipec_fused_layer_norm_3`), which CUPTI records by itself. Under Triton's
  CPU interpreter there is no device kernel: each launch is a range of its own, named the same
  (`ranged_plan`).

Cost when no profiler records: the callers read `profiler_state._is_profiler_enabled`, a module
attribute torch sets while a profiler (torch.profiler.profile or torch.autograd.profiler.profile)
is open, once per call; nothing else of this module runs.
"""

from __future__ import annotations

import torch
import torch.autograd.profiler as profiler_state

if not hasattr(profiler_state, "_is_profiler_enabled"):  # a torch without the flag: ask the C++ profiler
    class _AskTorch:
        @property
        def _is_profiler_enabled(self) -> bool:
            return bool(torch._C._autograd._profiler_enabled())

    profiler_state = _AskTorch()  # noqa: F811 - same interface as the module

RANGE_PREFIX = "pipec:"


def range_name(graph: str) -> str:
    """`pipec:graph_0`: the range of the calls of the graph (program) `graph`."""
    return RANGE_PREFIX + graph


def graph_range(name: str):
    """The profiler range `name` (`range_name`) of one call of a program."""
    return torch.profiler.record_function(name)


class RangedStep:
    """A plan step run inside a profiler range named after it: a launch by its kernel's name,
    a choice group by its group's. Other attributes are the step's (the runner's allocation
    schedule reads `allocates`, `writes` and `alternatives`)."""

    __slots__ = ("step", "label")

    def __init__(self, step, label: str):
        self.step, self.label = step, label

    def __getattr__(self, name):
        return getattr(self.step, name)

    def __call__(self, vals, symvals, device):
        with torch.profiler.record_function(self.label):
            self.step(vals, symvals, device)


def step_label(step) -> str | None:
    """The range name of a plan step; None for a library call (ATen records those itself)."""
    kernel = getattr(step, "kernel", None)
    if kernel is not None:
        return kernel.name
    if getattr(step, "alternatives", None):
        return f"pipec choice {step.name}"
    return None


def ranged_plan(runner, plan: list) -> list:
    """`plan` ((step, release) pairs) with each kernel launch inside its named range; built once
    per plan and kept on the runner, so its allocation schedule is cached too."""
    cache = runner.__dict__.setdefault("_ranged_plans", {})
    hit = cache.get(id(plan))
    if hit is not None and hit[0] is plan:
        return hit[1]
    ranged = []
    for step, release in plan:
        label = step_label(step)
        ranged.append((step if label is None else RangedStep(step, label), release))
    cache[id(plan)] = (plan, ranged)
    return ranged


__all__ = ["RANGE_PREFIX", "RangedStep", "graph_range", "profiler_state", "range_name", "ranged_plan", "step_label"]
