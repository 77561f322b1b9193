"""Programmatic dependent launch (PDL) for the kernels of a CUDA Graph.

Between two kernels of a replayed graph the GPU idles while the first one's last programs
drain and the next one's programs are scheduled. Hopper (sm_90) lets a kernel launched with
the PDL attribute be scheduled before the kernel ahead of it has finished: once every program
of that kernel has signalled (`griddepcontrol.launch_dependents`) or exited, and it waits
(`griddepcontrol.wait`) until that kernel has completed and its writes are visible.

So a Triton kernel loaded for PDL (`grid_dependency_source`) starts with

    tl.extra.cuda.gdc_wait()    # before any load or store: the kernel ahead is done

Waiting first thing keeps every ordering the plan relies on: a kernel reads nothing, and
overwrites no buffer a kernel ahead still reads (the memory plan reuses slots), before that
kernel has completed; and as every PDL kernel waits for the one ahead, completion stays in
launch order, so a kernel two launches on waits for both. Library kernels (cuBLAS, cuDNN, ATen)
are launched without the attribute and wait for everything ahead as before. Gluon kernels are
loaded as written and launched without it.

The kernels do not signal early: the next kernel is scheduled as each program exits. Measured
on an H100 (session 40, `benchmarks/pdl_ab.py`), under CUDA Graphs: GPT-2 1 x 128 fp32 1.529 ->
1.451 ms, BERT base 2.098 -> 2.060, BERT-large 5.842 -> 5.809; signalling at the start of each
kernel gave 1.475, 2.072 and 5.797 (better on BERT-large only, by 0.2%), and in a chain of
4096-row layer norms it made each kernel 13% slower (the next kernel's programs wait on the SMs).

Only under CUDA Graphs (the runner's `choice_timer == "graph"`): a PDL launch goes through
Triton's launcher, not torch's C++ one (static_launch.py), which only graph replay makes free.
Off with the option `pdl=False` (`PIPEC_PDL=0`).
"""

from __future__ import annotations

import functools
import re

# what a Triton kernel's body starts with when loaded for PDL (the module imports triton.language as tl)
GRID_DEPENDENCY = ("tl.extra.cuda.gdc_wait()",)


@functools.cache
def pdl_supported(device_index: int) -> bool:
    """Whether kernels launched on this CUDA device can use PDL: sm_90 or newer, with a Triton
    that has the grid-dependency wait (its launcher sets the attribute from `launch_pdl`)."""
    import torch

    # ROCm reports its own architectures through the same capability call (MI300: 9.4)
    if not torch.cuda.is_available() or torch.version.hip is not None \
            or torch.cuda.get_device_capability(device_index)[0] < 9:
        return False
    try:
        from triton.language.extra.cuda import gdc_wait  # noqa: F401
    except ImportError:
        return False
    return True


def grid_dependency_source(source: str, name: str) -> str | None:
    """`source` with the kernel `name`'s body starting with the PDL wait; None when
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
