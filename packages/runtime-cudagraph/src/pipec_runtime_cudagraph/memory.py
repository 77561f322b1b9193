"""The memory plan: slot liveness checks and slot sizes.

Codegen assigns intermediates to slots; several buffers share a slot when their
lifetimes are disjoint. A buffer is live from the first step that writes it to the
last step that reads it — or to the end when it is a program output. A value made
by a view extern (`aten.permute`, ...) aliases its source, so it keeps the source's
buffer alive too. Reusing a slot in the very step that last reads the old buffer is
a conflict (kernels may read and write in any order), unless that launch step declares
the pair in its `inplace` attribute (docs/IR.md, "In-place launches").
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from pipec_ir import ITEMSIZE, Program, get_attr

ALIGN = 16

# Extern targets whose results are views of their first argument (never copies).
VIEW_TARGETS = frozenset(
    f"aten.{op}.{overload}"
    for op in ("reshape", "view", "_unsafe_view", "permute", "expand", "slice", "select", "t", "transpose",
               "as_strided", "unsqueeze", "squeeze", "alias", "narrow", "unfold", "diagonal", "view_as",
               "expand_as", "unbind", "split", "chunk", "split_with_sizes")
    for overload in ("default", "int", "Tensor", "dim", "dims", "Dimname", "using_ints", "using_sizes"))


def is_view_target(target: str) -> bool:
    if target in VIEW_TARGETS:
        return True
    parts = target.split(".")
    return len(parts) >= 2 and f"aten.{parts[1]}.default" in VIEW_TARGETS and parts[0] == "aten"


class MemoryPlanError(ValueError):
    """Two buffers of one slot are live at once, or a slot is too small or missing."""


def round_up(nbytes: int, align: int = ALIGN) -> int:
    return -(-int(nbytes) // align) * align


def buffer_nbytes(buffer) -> sympy.Expr:
    return sympy.Mul(*buffer.type.shape) * ITEMSIZE[buffer.type.dtype] if buffer.type.shape \
        else sympy.Integer(ITEMSIZE[buffer.type.dtype])


def lifetimes(program: Program) -> dict[str, tuple[int, int]]:
    """Buffer name -> (first step writing it, last step its storage is needed)."""
    end = len(program.steps)
    root: dict[str, str] = {}  # view value -> the buffer whose storage it shares
    first: dict[str, int] = {}
    last: dict[str, int] = {}

    def touch(name: str, k: int) -> None:
        name = root.get(name, name)
        last[name] = max(last.get(name, k), k)

    for k, step in enumerate(program.steps):
        for name in step.inputs:
            touch(name, k)
        view = step.kind == "extern" and is_view_target(step.target) and step.inputs
        for name in step.outputs:
            if view:
                root[name] = root.get(step.inputs[0], step.inputs[0])
                touch(name, k)
            else:
                first.setdefault(name, k)
                touch(name, k)
    for name in program.outputs:
        if name is not None:
            touch(name, end)
    return {name: (first[name], last.get(name, first[name])) for name in first}


def plan_check(program: Program, symbol_values: dict[str, int] | None = None) -> None:
    """Raise `MemoryPlanError` listing every problem with the program's slots.

    Sizes with symbols are compared at `symbol_values` (default: the symbols' hints).
    """
    values = {s.name: s.hint for s in program.symbols}
    values.update(symbol_values or {})
    subs = {sym: values[sym.name] for sym in _free_symbols(program) if sym.name in values}
    slots = {s.index: s for s in program.slots}
    live = lifetimes(program)
    problems: list[str] = []
    by_slot: dict[int, list] = {}
    for b in program.buffers:
        if b.slot is None:
            continue
        if b.slot not in slots:
            problems.append(f"buffer {b.name} uses slot {b.slot}, which is not declared")
            continue
        need, have = _int(buffer_nbytes(b), subs), _int(slots[b.slot].nbytes, subs)
        if need is not None and have is not None and need > have:
            problems.append(f"buffer {b.name} needs {need} bytes but slot {b.slot} has {have}")
        if b.name in live:
            by_slot.setdefault(b.slot, []).append(b.name)
    for slot, names in sorted(by_slot.items()):
        ordered = sorted(names, key=lambda n: live[n])
        for i, a in enumerate(ordered):
            for b in ordered[i + 1:]:
                (a0, a1), (b0, b1) = live[a], live[b]
                if b0 <= a1 and a0 <= b1 and not _in_place(program, a, b, a1, b0):
                    problems.append(
                        f"slot {slot}: {a} (steps {a0}..{_end(a1, program)}) and {b} "
                        f"(steps {b0}..{_end(b1, program)}) are live at the same time")
    if problems:
        raise MemoryPlanError(f"program {program.name}: bad memory plan: " + "; ".join(problems))


def _in_place(program: Program, a: str, b: str, a_last: int, b_first: int) -> bool:
    """`b` is written in place of `a` at the step where `a` dies: allowed when that launch
    step declares it (attribute `inplace`, ((output, input), ...); codegen promises the
    kernel reads each element of the input at the index it writes the output)."""
    if a_last != b_first or a_last >= len(program.steps):
        return False
    step = program.steps[a_last]
    return step.kind == "launch" and (b, a) in tuple(get_attr(step.attrs, "inplace", ()) or ())


def _end(k: int, program: Program) -> str:
    return "end" if k >= len(program.steps) else str(k)


def _int(expr, subs) -> int | None:
    value = sympy.sympify(sympy.sympify(expr).xreplace(subs))  # a bare symbol xreplaces to a plain int
    return int(value) if value.is_number else None


def _free_symbols(program: Program) -> set:
    out: set = set()
    for b in (*program.inputs, *program.buffers):
        for d in b.type.shape:
            out |= sympy.sympify(d).free_symbols
    for s in program.slots:
        out |= sympy.sympify(s.nbytes).free_symbols
    return out


# ---------------------------------------------------------------- what a call holds


@dataclass(frozen=True)
class MemoryProfile:
    """The bytes a call of a program holds, step by step, under one allocation model."""
    peak: int  # the most bytes live at once (inputs not counted)
    step: int  # the Program step at which that peak is first reached (-1: nothing is allocated)
    live: tuple[tuple[str, int], ...]  # (storage, bytes) live at the peak, largest first
    per_step: tuple[int, ...]  # bytes live at each step run (the alternative's steps only)


def alternatives(program: Program) -> tuple[str, ...]:
    """The names of the alternatives any choice group of `program` has (docs/IR.md)."""
    return tuple(dict.fromkeys(get_attr(s.attrs, "alternative") for s in program.steps
                               if get_attr(s.attrs, "choice") is not None))


def run_steps(program: Program, alternative: str | None = None) -> list[int]:
    """The indices of the steps a call runs: in each choice group, the steps of `alternative`
    where the group has one, else those of its default (else of its first alternative)."""
    groups: dict[str, list[tuple[int, str, bool]]] = {}
    for k, s in enumerate(program.steps):
        group = get_attr(s.attrs, "choice")
        if group is not None:
            groups.setdefault(group, []).append((k, get_attr(s.attrs, "alternative"), bool(get_attr(s.attrs, "default"))))
    picked: dict[str, str] = {}
    for group, members in groups.items():
        names = [a for _, a, _ in members]
        if alternative in names:
            picked[group] = alternative
        else:
            picked[group] = next((a for _, a, d in members if d), names[0])
    return [k for k, s in enumerate(program.steps)
            if get_attr(s.attrs, "choice") is None or get_attr(s.attrs, "alternative") == picked[get_attr(s.attrs, "choice")]]


def memory_profile(program: Program, *, alternative: str | None = None, slots: bool = False,
                   symbol_values: dict[str, int] | None = None) -> MemoryProfile:
    """The bytes one call of `program` holds at each step, from the Program alone (no GPU).

    Every value a step makes is allocated at the step first writing it and freed after the
    last step reading it (graph outputs: kept); a view step's result and an in-place launch's
    output (`inplace`) share their source's storage; library (extern) results count from the
    call making them. Inputs (parameters included) are not counted: they are at rest.

    `slots=False`: each value has storage of its own (what a specialized run allocates): for
    this step order, the least any plan can hold, each value freed as soon as its last reader
    has run. `slots=True`: each memory-plan slot is one storage from the first write of its
    first buffer to the last use of its last buffer (the general path, and what a CUDA Graph
    capture allocates in its pool). Choice groups run `alternative` (else their default).
    Sizes with symbols are taken at `symbol_values` (default: the symbols' hints).
    """
    values = {s.name: s.hint for s in program.symbols}
    values.update(symbol_values or {})
    subs = {sym: values[sym.name] for sym in _free_symbols(program) if sym.name in values}
    types = {b.name: b for b in (*program.inputs, *program.buffers)}
    inputs = {b.name for b in program.inputs}
    slot_of = {b.name: b.slot for b in program.buffers if b.slot is not None} if slots else {}
    slot_bytes = {s.index: s.nbytes for s in program.slots}
    order = run_steps(program, alternative)
    root: dict[str, str] = {}  # value -> the value whose storage it is (views, in-place outputs)

    def storage(name: str) -> str:
        name = root.get(name, name)
        return f"slot {slot_of[name]}" if name in slot_of else name

    first: dict[str, int] = {}
    last: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    for pos, k in enumerate(order):
        step = program.steps[k]
        for name in step.inputs:
            key = storage(name)
            last[key] = max(last.get(key, pos), pos)
        view = step.kind == "extern" and is_view_target(step.target) and step.inputs
        donors = dict(get_attr(step.attrs, "inplace", ()) or ()) if step.kind == "launch" else {}
        for name in step.outputs:
            if view:
                root[name] = root.get(step.inputs[0], step.inputs[0])
            elif name in donors:
                root[name] = root.get(donors[name], donors[name])
            key = storage(name)
            if root.get(name, name) in inputs or (key == name and name in inputs):
                continue
            if key not in first:
                first[key] = pos
                b = types.get(root.get(name, name))
                size = slot_bytes[slot_of[name]] if name in slot_of else (buffer_nbytes(b) if b is not None else 0)
                nbytes[key] = _int(size, subs) or 0
            last[key] = max(last.get(key, pos), pos)
    for name in program.outputs:
        if name is not None and storage(name) in first:
            last[storage(name)] = len(order)
    per_step = []
    for pos in range(len(order)):
        per_step.append(sum(n for key, n in nbytes.items() if first[key] <= pos <= last.get(key, first[key])))
    if not per_step or max(per_step) == 0:
        return MemoryProfile(0, -1, (), tuple(per_step))
    peak = max(per_step)
    pos = per_step.index(peak)
    live = sorted(((key, n) for key, n in nbytes.items() if first[key] <= pos <= last.get(key, first[key])),
                  key=lambda item: (-item[1], item[0]))
    return MemoryProfile(peak, order[pos], tuple(live), tuple(per_step))


def peak_report(program: Program, symbol_values: dict[str, int] | None = None) -> dict:
    """The peak bytes of one call, planned (slots) and at the liveness bound (every value freed
    after its last reader), for the default run and for each alternative forced; `worst` is
    the largest planned peak of any of them (what a call holds whichever alternative it picks)."""
    out = {}
    for alt in (None, *alternatives(program)):
        planned = memory_profile(program, alternative=alt, slots=True, symbol_values=symbol_values)
        bound = memory_profile(program, alternative=alt, slots=False, symbol_values=symbol_values)
        out[alt or "default"] = {"planned": planned.peak, "bound": bound.peak,
                                 "step": program.steps[planned.step].target if planned.step >= 0 else None,
                                 "live": [list(item) for item in planned.live[:6]]}
    out["worst"] = max(v["planned"] for v in out.values())
    return out
