"""What a kernel writer produces (`KernelSource`), the scopes it writes lines into, and
the error it fails with. A leaf: the writers (writer.py, reduction_rows.py and the kernel
kinds built on them) all import it."""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy


def writes_clause(outputs) -> str:
    """How a kernel's docstring ends: the values it stores (kernel_memo.py finds it there to give
    a kernel's source to another kernel of its structure under that one's names)."""
    return f"; writes {', '.join(outputs)}"


class CodegenError(Exception):
    """The plan asks for something this code generator cannot emit."""


@dataclass
class Scope:
    lines: list[str]
    inner: bool
    indent: str
    cache: dict = field(default_factory=dict)


@dataclass
class KernelSource:
    source: str
    sizes: tuple[tuple[str, sympy.Expr], ...]
    uses_libdevice: bool
    persistent: bool
    rnumel: sympy.Expr | None
    outer_reduction: bool = False  # reduces non-innermost dims (x runs along the contiguous dim)
