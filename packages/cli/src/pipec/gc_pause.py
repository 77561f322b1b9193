"""Python's cyclic garbage collector paused while pipec compiles a graph.

A compile allocates millions of short-lived objects (fx nodes, IR nodes, fusion groups, sympy
expressions, kernel source), and every 700 allocations the collector walks the young ones; every
tenth of those walks the middle generation, and now and then the whole heap, which in a process
holding torch, transformers and a model is over half a million tracked objects. Measured on a
2-core CPU host (BERT base training, its forward and backward graphs traced at 2 x 128): of
3.4-3.9 s of pipec's fusion and codegen, 1.3-1.4 s were collections; paused (here and around
AOTAutograd), fusion and codegen took 2.1-2.5 s, and the whole capture (Dynamo, AOTAutograd,
lowering, fusion, codegen) 10.9-11.3 -> 9.5-9.7 s (docs/performance.md, "Session 9"). Reference
counting frees nearly everything a compile drops; the cycles it leaves are collected by the first
collection after the pause.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Collections off for the body, back as they were after it (nested pauses keep it off until
    the outermost ends; a collector the caller turned off stays off)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
