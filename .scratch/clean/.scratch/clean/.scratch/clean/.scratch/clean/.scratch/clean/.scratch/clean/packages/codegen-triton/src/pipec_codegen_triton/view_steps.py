"""ATen arguments of reshape steps (shared by the view kernels and the matmul alternatives)."""

from __future__ import annotations

import sympy
from pipec_ir import Ref, size_attr


def reshape_args(ref: Ref, shape) -> tuple:
    """`(ref, shape)` for `aten.reshape`: symbolic sizes as `Size` leaves the runtime evaluates,
    except that a reshape with exactly one symbolic dim writes -1 there (docs/IR.md, "Symbolic sizes")."""
    shape = tuple(sympy.sympify(s) for s in shape)
    symbolic = [d for d, s in enumerate(shape) if not s.is_Integer]
    if len(symbolic) == 1:
        return (ref, tuple(-1 if d in symbolic else int(s) for d, s in enumerate(shape)))
    return (ref, tuple(size_attr(s) for s in shape))
