"""Inputs handed over by the caller: each is dropped after its last reader, as a buffer is.

A backward graph's inputs are mostly the activations its forward saved. AOTAutograd hands
them over: it clears its own references and passes the one list left, which the compiled
function may clear (its boxed calling convention, `steal_args`). Inductor's `call(args)` does
`args.clear()` and deletes each input after its last use, so a saved activation is freed as
soon as the backward has read it, and the backward's peak is what is still to be read plus
the gradients made so far.

A run that keeps every input until it returns holds all of them to its end: on ResNet-50
training (32 x 224, bf16) the activations of the forward (~1.7 GB) stayed allocated through
the whole backward. `ProgramRunner.call_owned(inputs)` is the handed-over call: once the
guards pass, the run clears `inputs` and drops its own reference to each input (one not
returned) after the last step that reads it. References the caller keeps elsewhere (a
module's parameters, the user's batch) keep those tensors alive as before; only tensors
nobody else holds are freed early. A plain call (`runner(inputs)`) never touches the caller's
list, and dropping the run's own references changes nothing for it.

Not taken over: CPU tensors on a machine with CUDA (`run_cpu_on_cuda` keeps the caller's
tensors to hand back eager's aliasing), and the CUDA Graph runtime, whose callable has no
`call_owned` (it copies its inputs into the graph's buffers anyway).
"""

from __future__ import annotations

from pipec_ir import ref_names


def reads_of(obj, runner) -> set[int] | None:
    """The values a step object (launch, extern, reinterpret) reads or writes; None for an
    object of a kind not known here (then nothing before it may be dropped)."""
    ptrs = getattr(obj, "ptrs", None)
    if ptrs is not None:  # a launch: its pointers are every value it reads or writes
        return set(ptrs)
    ir = getattr(obj, "ir", None)
    if ir is None:
        return None
    names = (*ir.inputs, *ir.outputs, *(n for _, v in ir.attrs for n in ref_names(v)))
    return {runner.index[n] for n in names if n in runner.index}


def input_releases(positions, runner) -> dict:
    """{position key: the input indices whose last reader is there}, over `positions`, an
    ordered iterable of (key, step objects at that key). Inputs the program returns are kept;
    an object of unknown kind keeps every input up to it."""
    inputs = set(range(len(runner.program.inputs))) - {i for i in runner.out_index if i is not None}
    last: dict[int, object] = {}
    for key, objs in positions:
        for obj in objs:
            touched = reads_of(obj, runner)
            for i in (inputs if touched is None else inputs & touched):
                last[i] = key
    out: dict = {}
    for i, key in last.items():
        out.setdefault(key, []).append(i)
    return {key: sorted(values) for key, values in out.items()}


def plan_objects(step) -> list:
    """The step objects of one position of the runner's plan: a choice group's every alternative
    (the general path may run any of them)."""
    alternatives = getattr(step, "alternatives", None)
    return [o for alt in alternatives.values() for o in alt] if alternatives else [step]
