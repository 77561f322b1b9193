"""Kernel sources written once per structure in a program: the twelve layers of a BERT have
twelve copies of each pointwise and reduction kernel, which differ only in their names.

A kernel's source depends on its kind, domain and reduced dims, on its inputs' types and, per
node, on the op, type and attributes and on where each input comes from (which node of the
kernel, or which kernel input); nowhere else in the body do names appear (buffers are `in_ptrK`
and `out_ptrK`, values `tmpK`). Names appear twice in the source: in the `def` line and in the
docstring's list of what the kernel writes. The first source of a structure is kept with those
two spots marked and given to every later kernel of that structure with its own names. A
bounds-checked kernel names its buffers in its assertions, so it is always written afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pipec_ir import Kernel

from .kernel_source import KernelSource, writes_clause

_NAME = "\0name\0"
_WRITES = "\0writes\0"


def _writes(kernel: Kernel) -> str:
    """The end of the kernel's docstring line."""
    return writes_clause(kernel.outputs) + '"""\n'


class WrittenKernels:
    """Kernel sources of one program, by structure."""

    def __init__(self, nodes: dict, types: dict):
        self.nodes, self.types = nodes, types
        self._templates: dict[tuple, KernelSource] = {}  # text with the name and written values marked
        self.hits = 0

    def write(self, kernel: Kernel, write: Callable[[], KernelSource]) -> KernelSource:
        """`write()`, or the source of an earlier kernel of the same structure under this one's names."""
        key = self._structure(kernel)
        if key is None:
            return write()
        template = self._templates.get(key)
        if template is not None:
            self.hits += 1
            text = template.source.replace(_NAME, kernel.name).replace(_WRITES, _writes(kernel))
            return replace(template, source=text)
        source = write()
        marked = self._marked(source.source, kernel)
        if marked is not None:
            self._templates[key] = replace(source, source=marked)
        return source

    def _structure(self, kernel: Kernel) -> tuple | None:
        local = {name: ("node", k) for k, name in enumerate(kernel.nodes)}
        for k, name in enumerate(kernel.inputs):
            local.setdefault(name, ("input", k))
        facts = []
        for name in kernel.nodes:
            node = self.nodes[name]
            reads = tuple(local.get(v) for v in node.inputs)
            if None in reads:  # a value from outside the kernel's own lists: no sharing
                return None
            facts.append((node.op, node.type, node.attrs, reads))
        outputs = tuple(local.get(o) for o in kernel.outputs)
        if None in outputs:
            return None
        return (kernel.kind, tuple(kernel.domain), tuple(kernel.reduce_dims),
                tuple(self.types[i] for i in kernel.inputs), tuple(facts), outputs)

    @staticmethod
    def _marked(text: str, kernel: Kernel) -> str | None:
        """`text` with its one `def` line's name and its one list of written values marked, or
        None when either is not there exactly once (then the source is not shared)."""
        define, writes = f"def {kernel.name}(", _writes(kernel)
        if text.count(define) != 1 or text.count(writes) != 1 or _NAME in text or _WRITES in text:
            return None
        return text.replace(define, f"def {_NAME}(").replace(writes, _WRITES)
