"""View steps: their ATen targets, and reshape arguments (shared by the view kernels and the matmul alternatives)."""

from __future__ import annotations

import sympy
from pipec_ir import Ref, size_attr


# View ops materialized as torch views (never copies) when a library call or the
# caller needs them as tensors: IR op -> the ATen target of its extern step.
VIEW_TARGETS = {
    "reshape": "aten.reshape.default",
    "permute": "aten.permute.default",
    "expand": "aten.expand.default",
    "slice": "aten.slice.Tensor",
    "select": "aten.select.int",
}


def reshape_args(ref: Ref, shape) -> tuple:
    """`(ref, shape)` for `aten.reshape`: symbolic sizes as `Size` leaves the runtime evaluates,
    except that a reshape with exactly one symbolic dim writes -1 there (docs/IR.md, "Symbolic sizes")."""
    shape = tuple(sympy.sympify(s) for s in shape)
    symbolic = [d for d, s in enumerate(shape) if not s.is_Integer]
    if len(symbolic) == 1:
        return (ref, tuple(-1 if d in symbolic else int(s) for d, s in enumerate(shape)))
    return (ref, tuple(size_attr(s) for s in shape))
