"""Memory plan: give kernel-written intermediates slots by liveness, reusing freed slots.

A buffer is live from the step that writes it to the last step that reads it.
Library calls may return views of their inputs, so an extern's inputs stay live
as long as its outputs do. Graph outputs never share storage.
"""

from __future__ import annotations

import sympy
from pipec_ir import ITEMSIZE, Buffer, Slot, Step, TensorType
from pipec_ir.symbolic import numel

ALIGN = 64


def _nbytes(t: TensorType) -> sympy.Expr:
    raw = numel(t.shape) * ITEMSIZE[t.dtype]
    if raw.is_Integer:
        return sympy.Integer(-(-int(raw) // ALIGN) * ALIGN)
    return raw


def plan_memory(steps: tuple[Step, ...], types: dict[str, TensorType], outputs: set[str]):
    """Returns (buffers with slots, slots, planned peak bytes)."""
    last_use: dict[str, int] = {}
    alias_of: dict[str, set[str]] = {}
    for i, step in enumerate(steps):
        for name in step.inputs:
            last_use[name] = i
        if step.kind == "extern":
            for out in step.outputs:
                alias_of.setdefault(out, set()).update(step.inputs)
    for name in outputs:  # returned values live past the last step
        last_use[name] = len(steps)
    # An extern's output may alias its inputs: extend their lifetime (transitively).
    for i in reversed(range(len(steps))):
        step = steps[i]
        if step.kind != "extern":
            continue
        end = max((last_use.get(o, i) for o in step.outputs), default=i)
        for name in step.inputs:
            last_use[name] = max(last_use.get(name, i), end)
    free: list[tuple[sympy.Expr, int]] = []  # (nbytes, slot index) of freed slots
    slots: list[Slot] = []
    slot_of: dict[str, int] = {}
    live_until: dict[int, int] = {}
    buffers: list[Buffer] = []
    for i, step in enumerate(steps):
        # release slots whose buffers died before this step
        for idx, end in list(live_until.items()):
            if end < i:
                free.append((slots[idx].nbytes, idx))
                del live_until[idx]
        for out in step.outputs:
            t = types[out]
            if step.kind != "launch" or out in outputs:
                buffers.append(Buffer(out, t, None))
                continue
            need = _nbytes(t)
            pick = _best_fit(free, need)
            if pick is None:
                idx = len(slots)
                slots.append(Slot(idx, need))
            else:
                free.remove(pick)
                idx = pick[1]
            slot_of[out] = idx
            live_until[idx] = last_use.get(out, i)
            buffers.append(Buffer(out, t, idx))
    peak = sympy.Add(*[s.nbytes for s in slots]) if slots else sympy.Integer(0)
    return tuple(buffers), tuple(slots), peak


def _best_fit(free, need):
    """The smallest freed slot that holds `need` bytes. With symbolic sizes a slot is taken
    when it holds `need` for every value of the symbols (an exact match first)."""
    best = None
    for nbytes, idx in free:
        if nbytes.is_Integer and need.is_Integer:
            if int(nbytes) >= int(need) and (best is None or int(nbytes) < int(best[0])):
                best = (nbytes, idx)
        elif sympy.expand(nbytes - need) == 0:
            return (nbytes, idx)
        elif best is None and _always_at_least(nbytes, need):
            best = (nbytes, idx)
    return best


def _always_at_least(have: sympy.Expr, need: sympy.Expr) -> bool:
    """have >= need for all non-negative symbol values: their difference is a polynomial
    with non-negative coefficients (e.g. 512*s0 + 64 >= 256*s0)."""
    diff = sympy.expand(have - need)
    if diff.is_Integer:
        return int(diff) >= 0
    if not diff.is_polynomial(*diff.free_symbols):
        return False
    return all(c.is_Number and c >= 0 for c in sympy.Poly(diff, *diff.free_symbols).coeffs())
