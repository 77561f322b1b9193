"""The compile-time profile of a model's first call (pipec_ir.CompileProfile), and how it is shown.

`first_call(profile)` opens the profile's window around a first call and imports torch._dynamo
first (part `imports`, with the backend registry that a process's first `torch.compile` imports:
seconds in a new process, nothing later). The stages record their
own parts inside it (pipeline.compile_graph: capture, fusion, codegen, runtime_load; backend.py:
aot_autograd; the runtime: triton_compile, autotune, first_run); Dynamo's part comes from torch's
own timer, `torch._dynamo.utils.compilation_time_metrics["_compile.compile_inner"]` (every frame
Dynamo compiles, which includes the backend call), minus the time pipec's backend took inside it.
Where torch has no such timer, Dynamo's time is left in `other`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from pipec_ir import CompileProfile

# torch's dynamo_timed key of one frame's whole compile (convert_frame._compile)
DYNAMO_TIMER = "_compile.compile_inner"
# the part pipec's torch.compile backend records from entry to return (backend.py)
BACKEND_PART = "aot_autograd"

# what each part is, for the explain and bench tables
PART_LABELS = {
    "imports": "imports (Dynamo, once per process)",
    "dynamo": "Dynamo (tracing, guards)",
    "aot_autograd": "AOTAutograd",
    "device_checks": "device checks (cuDNN attention, once per process)",
    "capture": "capture (lowering to the IR)",
    "fusion": "fusion",
    "codegen": "codegen",
    "runtime_load": "runtime load",
    "triton_compile": "Triton compilation",
    "autotune": "autotuning",
    "first_run": "first run",
    "other": "other",
}


def _dynamo_seconds() -> float | None:
    """Seconds Dynamo has spent compiling frames in this process, by its own timer (None: no timer)."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return None
    times = compilation_time_metrics.get(DYNAMO_TIMER)
    return float(sum(times)) if times is not None else 0.0


@contextlib.contextmanager
def first_call(profile: CompileProfile) -> Iterator[CompileProfile]:
    """Measure the block (a compiled model's first call) into `profile` (module docstring)."""
    if profile.recording:  # an outer window measures already
        yield profile
        return
    with profile.measure():
        with profile.part("imports"):  # a process's first compile imports Dynamo (seconds), a later one nothing
            import torch._dynamo  # noqa: F401
        dynamo_before = _dynamo_seconds()
        backend_before = profile.inclusive.get(BACKEND_PART, 0.0)
        try:
            yield profile
        finally:
            dynamo_after = _dynamo_seconds()
            if dynamo_before is not None and dynamo_after is not None and dynamo_after >= dynamo_before:
                backend = profile.inclusive.get(BACKEND_PART, 0.0) - backend_before
                profile.add("dynamo", dynamo_after - dynamo_before - backend)


def format_seconds(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def profile_rows(data: dict) -> list[tuple[str, str, str]]:
    """(part, seconds, share of the wall time) per part of `CompileProfile.to_dict()`, then the total."""
    if not data:
        return []
    wall = data["wall_s"]
    rows = []
    for part, seconds in data["seconds"].items():
        share = f"{seconds / wall:.0%}" if wall > 0 else "-"
        rows.append((PART_LABELS.get(part, part), format_seconds(seconds), share))
    rows.append(("first call (wall)", format_seconds(wall), "100%"))
    return rows


def profile_counts(data: dict) -> str:
    """`kernels 5 (5 unique), Triton compiles 0, kernels timed 0 (0 configs), choice groups timed 0
    (0 alternatives)`: the counts of `CompileProfile.to_dict()` in one line."""
    if not data:
        return ""
    c = data["counts"]
    # how many of the compiles ran in the compile worker processes (runtime compile_pool.py), where any did
    pooled = f" ({c['triton_compiles_in_workers']} in workers)" if c.get("triton_compiles_in_workers") else ""
    # kernels an earlier process compiled, launched from their cubins without Triton (runtime launch_store.py)
    stored = f", launched from the launch store {c['launches_from_store']}" if c.get("launches_from_store") else ""
    # kernels of a CUDA Graph launched with programmatic dependent launch (runtime pdl.py), where any were
    pdl = f", launched with PDL {c['pdl_kernels']}" if c.get("pdl_kernels") else ""
    # decisions the shipped tuning table made without timing (runtime tuning_table.py), where any were
    from_table = c.get("configs_from_table", 0) + c.get("choices_from_table", 0)
    table = (f", from the tuning table {c.get('configs_from_table', 0)} configs and "
             f"{c.get('choices_from_table', 0)} choices") if from_table else ""
    return (f"graphs {c.get('graphs', 0)}, kernels {c.get('kernels', 0)} ({c.get('unique_kernels', 0)} unique), "
            f"Triton compiles {c.get('triton_compiles', 0)}{pooled}{stored}{pdl}, kernels timed {c.get('kernels_timed', 0)} "
            f"({c.get('configs_tried', 0)} configs), choice groups timed {c.get('choice_groups_timed', 0)} "
            f"({c.get('alternatives_timed', 0)} alternatives){table}")




def profile_table(data: dict, title: str = "compile-time profile of the first call"):
    """A rich Table of `CompileProfile.to_dict()`: one row per part, its share of the wall time,
    the total, and the counts as its caption (None when nothing was measured)."""
    if not data:
        return None
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("part")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    for row in profile_rows(data):
        table.add_row(*row)
    table.caption = profile_counts(data)
    table.caption_justify = "left"
    return table


def process_started() -> float | None:
    """When this process started, as time.time() (Linux: /proc; None elsewhere)."""
    import os

    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, after the command name
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


class CommandClock:
    """Where a `pipec compile` / `pipec explain` command's time went, lap by lap: from the process's
    start (Python and the CLI's own imports: `startup`) to each `lap(name)`. A lap that holds a
    model's first call is split into the first call (its compile-time profile's wall time) and
    the rest (`split`)."""

    def __init__(self) -> None:
        started = process_started()
        self.last = time.time()
        self.seconds: dict[str, float] = {}
        if started is not None and started <= self.last:
            self.seconds["startup"] = self.last - started

    def lap(self, name: str) -> None:
        now = time.time()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.last
        self.last = now

    def split(self, name: str, part: str, part_seconds: float) -> None:
        """Lap `name` as `part` (`part_seconds` of it) and the rest of it."""
        whole = self.seconds.pop(name, 0.0)
        part_seconds = min(max(part_seconds, 0.0), whole)
        self.seconds[part] = part_seconds
        self.seconds[name] = whole - part_seconds

    def to_dict(self) -> dict:
        return {"wall_s": sum(self.seconds.values()), "seconds": dict(self.seconds)}


def command_line(data: dict) -> str:
    """`command up to this report 9.1 s: startup 1.2 s, import torch 2.4 s, ...` from
    `CommandClock.to_dict()`."""
    parts = ", ".join(f"{name} {format_seconds(s)}" for name, s in data["seconds"].items())
    return f"command up to this report {format_seconds(data['wall_s'])}: {parts}"


__all__ = ["PART_LABELS", "CommandClock", "command_line", "first_call", "profile_counts", "profile_rows",
           "profile_table"]
