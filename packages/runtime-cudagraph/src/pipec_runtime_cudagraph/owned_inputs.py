"""Inputs handed over by the caller: each is dropped after its last reader, as a buffer is.

A backward graph's inputs are mostly the activations its forward saved. AOTAutograd hands
them over: it clears its own references and passes the one list left, which the compiled
function may clear (its boxed calling convention, `steal_args`). Inductor's `call(args)` does
`args.clear()` and deletes each input after its last use, so a saved activation is freed as
soon as the backward has read it, and the backward's peak is what is still to be read plus
the gradients made so far.

A run that keeps every input until it returns holds all of them to its end: ResNet-50's
training step (32 x 224, AMP bf16, H200) peaked at 1577 MiB that way, against eager's 1297,
and at 1304 once the backward dropped them. `ProgramRunner.call_owned(inputs)` is the handed-over call: once the
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

from .steps import touched_values


def input_releases(positions, runner) -> dict:
    """{position key: the input indices whose last reader is there}, over `positions`, an
    ordered iterable of (key, step objects at that key). Inputs the program returns are kept;
    an object of unknown kind keeps every input up to it."""
    inputs = set(range(len(runner.program.inputs))) - {i for i in runner.out_index if i is not None}
    inputs -= {k for k, _ in getattr(runner, "write_index", ())}  # written after the run (writes.py)
    last: dict[int, object] = {}
    for key, objs in positions:
        for obj in objs:
            touched = touched_values(obj, runner)
            for i in (inputs if touched is None else inputs & touched):
                last[i] = key
    out: dict = {}
    for i, key in last.items():
        out.setdefault(key, []).append(i)
    return {key: sorted(values) for key, values in out.items()}

