"""Programmatic dependent launch (PDL) for the kernels of a CUDA Graph.

Between two kernels of a replayed graph the GPU idles while the first one's last programs
drain and the next one's programs are scheduled: on BERT-large's replay (H100, session 39) the
gaps summed to 550 µs over 247 launches, against 283 over 297 for Inductor's. Hopper
(sm_90) lets a kernel launched with the PDL attribute start before the kernel ahead of it has
finished: its programs are scheduled as soon as every program of the one ahead has signalled
(`griddepcontrol.launch_dependents`) or exited, and wait (`griddepcontrol.wait`) until that
kernel has completed and its writes are visible.

So a Triton kernel loaded for PDL (`grid_dependency_source`) starts with

    tl.extra.cuda.gdc_wait()                 # before any load or store: the kernel ahead is done
    tl.extra.cuda.gdc_launch_dependents()    # the next kernel may be scheduled already

Waiting first thing keeps every ordering the plan relies on: a kernel reads nothing, and
overwrites no buffer a kernel ahead still reads (the memory plan reuses slots), before that
kernel has completed; and as every PDL kernel waits for the one ahead, completion stays in
launch order, so a kernel two launches on waits for both. Library kernels (cuBLAS, cuDNN, ATen)
are launched without the attribute and wait for everything ahead as before. Gluon kernels are
loaded as written and launched without it.

Only under CUDA Graphs (the runner's `choice_timer == "graph"`): a PDL launch goes through
Triton's launcher, not torch's C++ one (static_launch.py), which only graph replay makes free.
Off by default, on with the option `pdl=True` (`PIPEC_PDL=1`), until whole models have measured it.
"""

from __future__ import annotations

import functools
import re

# what a Triton kernel's body starts with when loaded for PDL (the module imports triton.language as tl)
GRID_DEPENDENCY = ("tl.extra.cuda.gdc_wait()", "tl.extra.cuda.gdc_launch_dependents()")


@functools.cache
def pdl_supported(device_index: int) -> bool:
    """Whether kernels launched on this CUDA device can use PDL: sm_90 or newer, with a Triton
    that has the grid-dependency calls and a launcher that sets the attribute."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability(device_index)[0] < 9:
        return False
    try:
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: F401
    except ImportError:
        return False
    return True


def grid_dependency_source(source: str, name: str) -> str | None:
    """`source` with the kernel `name`'s body starting with the PDL wait and signal; None when
    `name` is not a `@triton.jit` function of it (a Gluon kernel: launched as written)."""
    header = re.search(rf"^@triton\.jit[^\n]*\ndef {re.escape(name)}\(.*?\):[ \t]*\n", source, re.MULTILINE | re.DOTALL)
    if header is None:
        return None
    rest = source[header.end():]
    indent = re.match(r"[ \t]+", rest)
    if indent is None:
        return None
    at = header.end()
    docstring = re.match(r'[ \t]+"""[^\n]*"""[ \t]*\n', rest)  # one-line docstrings, as codegen writes them
    if docstring is not None:
        at += docstring.end()
    lines = "".join(f"{indent.group(0)}{line}\n" for line in GRID_DEPENDENCY)
    return source[:at] + lines + source[at:]
