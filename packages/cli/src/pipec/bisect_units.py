"""The units `pipec bisect` runs alone: consecutive steps of a Program that make one KernelPlan
kernel (or one choice group, or a collective's start with its wait), each runnable as a Program
of its own through the public launch runtime."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pipec_ir
from pipec_ir import Buffer, CompileOptions, KernelPlan, Program, ref_names


@dataclass
class Unit:
    """Consecutive Program steps that make one KernelPlan kernel (or one choice group), or a
    collective's start with its wait."""
    index: int
    steps: tuple[pipec_ir.Step, ...]
    kernel: str | None  # the KernelPlan kernel, when known
    reads: tuple[str, ...]
    writes: tuple[str, ...]



_WAIT = "_c10d_functional.wait_tensor.default"  # what codegen emits for `wait_tensor`


def program_units(program: Program, plan: KernelPlan | None) -> list[Unit]:
    owner = {o: k.name for k in (plan.kernels if plan else ()) for o in k.outputs}
    groups: list[tuple[Any, list]] = []
    # a collective's start and its wait are one unit: a pending result is never judged (its data
    # may still be in flight) and no start is left unwaited (docs/IR.md, "Collectives")
    wait_of = {s.inputs[0]: s for s in program.steps if s.kind == "extern" and s.target == _WAIT}
    for k, step in enumerate(program.steps):
        if step.kind == "extern" and step.target == _WAIT:
            continue
        if step.kind == "extern" and step.outputs and step.outputs[0] in wait_of:
            groups.append((("step", k), [step, wait_of[step.outputs[0]]]))
            continue
        choice = pipec_ir.get_attr(step.attrs, "choice")
        key = choice if choice is not None else next((owner[o] for o in step.outputs if o in owner), ("step", k))
        if groups and groups[-1][0] == key:
            groups[-1][1].append(step)
        else:
            groups.append((key, [step]))
    units = []
    for index, (key, steps) in enumerate(groups):
        writes: list[str] = []
        reads: list[str] = []
        for s in steps:
            for name in (*s.inputs, *(r for _, v in s.attrs for r in ref_names(v))):
                if name not in writes and name not in reads:
                    reads.append(name)
            writes.extend(o for o in s.outputs if o not in writes)
        kernel = key if isinstance(key, str) else None
        units.append(Unit(index, tuple(steps), kernel, tuple(reads), tuple(writes)))
    return units


def unit_program(program: Program, unit: Unit, name: str | None = None) -> Program:
    """A Program of the unit's steps alone: it reads what they read, returns what they write
    (no memory plan: every value a buffer of its own)."""
    types = {b.name: b.type for b in (*program.inputs, *program.buffers)}
    kernels = program.kernel_map()
    launched = list(dict.fromkeys(s.target for s in unit.steps if s.kind == "launch"))
    sub = Program(
        name=name or f"{program.name}_{unit.kernel or unit.index}",
        inputs=tuple(Buffer(n, types[n]) for n in unit.reads),
        outputs=tuple(unit.writes),
        buffers=tuple(Buffer(n, types[n]) for n in unit.writes if n in types and n not in unit.reads),
        kernels=tuple(kernels[k] for k in launched),
        steps=unit.steps, symbols=program.symbols)
    return pipec_ir.verify(sub)


def run_unit(program: Program, unit: Unit, values: dict, options: CompileOptions) -> dict[str, Any]:
    """Run the unit alone on `values` (by name): {value it writes: tensor}."""
    from pipec_runtime_cudagraph import load_launch

    sub = unit_program(program, unit)
    outs = load_launch(sub, runtime_options(options))([values[n] for n in unit.reads])
    return dict(zip(sub.outputs, outs))


def runtime_options(options: CompileOptions) -> CompileOptions:
    return options.with_extra(specialize=False, tuning_cache=False)
