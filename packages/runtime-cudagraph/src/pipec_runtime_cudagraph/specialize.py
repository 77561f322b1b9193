"""A Program specialized to one set of sizes: one generated Python function per shape.

After the first (general) run at some symbol values, `ProgramRunner` asks this module
for a *specialized run*: Python source generated from the step list with everything
that depends only on the sizes bound as constants — grids, integer kernel arguments,
constexprs, allocation shapes, extern arguments — and every value held in a local
variable. What is left per call is what Inductor's generated `call` does:

    def run(inputs, stream, owned=False):
        x, w = inputs                                  # guards: dtype, shape, device, layout
        if x.dtype is not D0 or x.shape != S0 ...: return None
        if owned: inputs.clear()                       # handed over (owned_inputs.py)
        buf0 = EMPTY(S2, dtype=D2, device=DEV)         # slot storage, at its first write
        t = E1(w, C1_0)                                # extern: the ATen overload's C entry
        L2(stream, buf0, t, ...)                       # launch: the compiled kernel's launcher
        t = w = None                                   # release after the last use (inputs too)
        return [buf0]

A launch goes through the kernel's compiled launcher (`CompiledKernel.run`, the call
`JITFunction.run` ends in) when the kernel was compiled for this device, config and sizes
and Triton's launch hooks are off; otherwise it is the normal `fn[grid](...)` call (the
interpreter, or a pointer whose alignment differs from what the kernel was specialized
for). `run` returns None when a guard fails; the runner then takes its general path,
which checks the inputs and says what is wrong.
"""

from __future__ import annotations

import keyword

import torch

from pipec_ir import Device, Dtype, Ref, Size, get_attr

from .allocations import allocation_lines, strided_allocator
from .exprs import compile_ints
from .extern_ops import direct_call, python_binding
from .input_guard import InputGuard
from .pysource import Source, compile_source
from .steps import TORCH_DTYPES, ExternStep, LaunchStep, touched_values, written_over
from .writes import holds
from .memory import is_view_target
from .owned_inputs import input_releases
from .views import REINTERPRET, Reinterpret, collapse_view_chains

ALIGNMENT = 16  # Triton specializes pointer arguments on 16-byte alignment


class SpecializeError(RuntimeError):
    """This program cannot be specialized (an argument kind the generator does not know)."""


def build_specialized(runner, plan, symvals: tuple, device: torch.device, observed: dict | None = None,
                      strides: list | None = None):
    """The specialized run of `runner` at `symvals` on `device`, or None (a choice group
    has not picked an alternative for these sizes yet). `observed`: the tensor layouts a
    general run at these sizes made ({value: (shape, stride, dtype)}; views.py). `strides`:
    the inputs' layouts at that run (input_strides), which the guards then expect.

    `plan` is the runner's step list for the device: `LaunchStep`, `ExternStep` and choice-group
    steps (each replaced here by the alternative it runs at these sizes)."""

    flat = _flatten(plan, symvals, device)
    if flat is None:
        return None
    flat = drop_dead_views(collapse_view_chains(flat, runner, symvals, observed or {}, strides), runner)
    src = Source()
    var = [f"v{i}" for i in range(runner.nvals)]
    dev = "DEV"
    src.namespace["DEV"] = device
    fast = strided_allocator(device)
    if fast is not None:  # allocates on the current device: the guards check it is this one
        src.namespace["EMPTY_STRIDED"] = fast
    device_index = device.index if device.type == "cuda" else -1
    names = [var[runner.index[b.name]] for b in runner.program.inputs]
    # the inputs the picked alternatives' kernels read: an input only an unpicked template reads
    # is not copied to row-major (a backward's saved transposed weight, when cuBLAS won)
    launched = {i for objs, _ in flat for obj in objs if isinstance(obj, LaunchStep) for i in obj.ptrs}
    dense = frozenset(k for k in runner.dense_inputs if runner.index[runner.program.inputs[k].name] in launched)
    dense |= {k for k, _ in runner.write_index}  # a launch may store into it: row-major, as `prepare` makes it
    header = guard_lines(src, runner, symvals, device_index, names, "run(inputs, stream, owned=False)", strides, dense)
    header.append("    if owned: inputs.clear()")  # handed over: the run's locals are the only references left
    after = release_points(flat, runner)
    dropped = input_releases((((k, j), [obj]) for k, (objs, _) in enumerate(flat) for j, obj in enumerate(objs)),
                             runner)
    allocs = allocation_lines(runner, flat, symvals, src, var, after, observed)
    written = {k for k, _ in runner.write_index}  # inputs the run writes (writes.py)
    stored: set[int] = set()  # values a launch stores into their input's tensor
    for k, (objs, _) in enumerate(flat):
        for j, obj in enumerate(objs):
            for line in allocs.get((k, j), ()):
                src.emit(line)
            if isinstance(obj, LaunchStep):
                for out, donor, shape, dtype in obj.binds:  # written over a library result (steps.py)
                    if donor in written:  # a written input, guarded contiguous, of the value's type
                        src.emit(f"{var[out]} = {var[donor]}")
                        stored.add(out)
                        continue
                    src.namespace["WRITTEN_OVER"] = written_over
                    src.emit(f"{var[out]} = WRITTEN_OVER({var[donor]}, {src.const('S', tuple(shape(*symvals)))}, "
                             f"{src.const('D', dtype)})")
                launcher = obj.launcher(symvals, device)
                inline = getattr(launcher, "inline", None)
                if inline is not None:  # the launch in this body: no Python frame per kernel
                    src.emit(inline.statement([var[i] for i in obj.ptrs], src.const))
                else:
                    src.emit(f"{src.const('L', launcher)}(stream, {', '.join(var[i] for i in obj.ptrs)})")
            elif isinstance(obj, Reinterpret):
                src.emit(_reinterpret_line(src, obj, var, symvals, runner, dev, device.type))
            else:
                src.emit(_extern_line(src, obj, var, symvals, runner, dev, device.type))
            if after.get((k, j)):
                src.emit(" = ".join(var[i] for i in after[(k, j)]) + " = None")
            if dropped.get((k, j)):  # the run's own references to inputs read for the last time
                src.emit(" = ".join(var[i] for i in dropped[(k, j)]) + " = None")
        if after.get((k, None)):
            src.emit(" = ".join(var[i] for i in after[(k, None)]) + " = None")
    copied = copied_inputs(strides, runner, dense)
    for k, value in runner.write_index:  # each written input's value into the caller's tensor (writes.py)
        if value in stored and k not in copied:
            continue  # the launch stored it into the caller's tensor itself
        src.namespace["HOLDS"] = holds
        original = caller_name(names, k)
        src.emit(f"if not HOLDS({original}, {var[value]}): {original}.detach().copy_({var[value]})")
    outs = ", ".join("None" if i is None else var[i] for i in runner.out_index)
    src.emit(f"return [{outs}]")
    return compile_source(header + src.lines, src.namespace, f"<pipec {runner.name} {symvals}>")


def _flatten(plan, symvals, device) -> list | None:
    """[(step objects run at this plan position, values released after them)]."""
    flat = []
    for step, release in plan:
        alternatives = getattr(step, "alternatives", None)
        if alternatives is None:
            flat.append(([step], release))
            continue
        chosen = _chosen_alternative(step, symvals, device)
        if chosen is None:
            return None
        flat.append((list(alternatives[chosen]), release))
    return flat


def drop_dead_views(flat: list, runner) -> list:
    """`flat` without the view steps whose results no later step reads and the program does not
    return. The step list serves every alternative of its choice groups; once one is picked,
    views only the others read are dead: a Linear's permuted weight feeds cuBLAS, while the
    Triton template reads the weight itself (one ATen call, a few microseconds, per Linear per call)."""

    needed = {i for i in runner.out_index if i is not None}
    opaque = False  # a step whose reads are not known: keep everything before it
    kept_rev = []
    for objs, release in reversed(flat):
        kept = []
        for obj in reversed(objs):
            if isinstance(obj, ExternStep):
                if not opaque and is_view_target(obj.name) and not needed.intersection(obj.outs):
                    continue
                needed.update(runner.index[name] for name in obj.ir.inputs)
            elif isinstance(obj, LaunchStep):
                needed.update(obj.ptrs)
            else:
                opaque = True
            kept.append(obj)
        kept_rev.append((kept[::-1], release))
    return kept_rev[::-1]


def release_points(flat: list, runner) -> dict[tuple, list[int]]:
    """Where each released value is dropped: {(position, object index): values} right after the
    last step object that touches it, or {(position, None): values} at the end of a position.

    The plan's releases come after a whole choice group, because they serve every alternative;
    within the one picked, a value dies at its own last use (the input of a library GEMM, before
    the pointwise kernel of its epilogue runs: one activation less at a Linear's peak)."""
    last: dict[int, tuple[int, int]] = {}
    for k, (objs, _) in enumerate(flat):
        for j, obj in enumerate(objs):
            touched = touched_values(obj, runner)
            if touched is None:  # keep the plan's own release points
                return {(k, None): list(release) for k, (_, release) in enumerate(flat) if release}
            for i in touched:
                last[i] = (k, j)
    points: dict[tuple, list[int]] = {}
    for k, (_, release) in enumerate(flat):
        for i in release:
            at = last.get(i)
            # never later than the plan says; an untouched value (an unpicked alternative's) goes there
            key = at if at is not None and at[0] <= k else (k, None)
            points.setdefault(key, []).append(i)
    return points


def _chosen_alternative(step, symvals, device) -> str | None:
    """What a choice group runs at `symvals` (as `ChoiceStep.pick`, without measuring)."""
    if step.forced is not None:
        return step.forced
    if not step.tune or device.type != "cuda":
        return step.default
    bucket = step.runner.bucket_key(symvals) if step.runner.symbols else ()
    return step.chosen.get(bucket)


def copied_inputs(strides: list | None, runner, dense: frozenset | None) -> set[int]:
    """The inputs `guard_lines` copies to row-major: not contiguous when specialized, read by a kernel."""
    dense = runner.dense_inputs if dense is None else dense
    return {k for k, stride in enumerate(strides or ()) if stride is not None and k in dense}


def caller_name(names: list[str], k: int) -> str:
    """The local holding the caller's tensor for input `k`, which the run writes (writes.py)."""
    return f"{names[k]}_caller"


def guard_lines(src: Source, runner, symvals: tuple, device_index: int, names: list[str],
                signature: str, strides: list | None = None, dense: frozenset | None = None) -> list[str]:
    """`def <signature>:` and the checks `prepare` makes, specialized to `symvals`: each
    input's dtype, shape, device (`get_device()`: -1 on the CPU) and contiguity; any
    failing check returns None (the caller then takes its general path). The checks run only
    where one C call says the inputs differ from those they last passed (input_guard.py).

    An input that was not contiguous when the run was specialized (`strides[k]`, its strides
    then) is guarded on those strides, and copied to a contiguous tensor where a kernel reads
    it (`dense`: the inputs the picked alternatives' kernels read; default: any kernel's, as in
    `prepare`): a backward graph's saved tensors (a transposed weight, an attention
    output) arrive with the same layout every step, and were sending every call down the
    general path."""
    lines = [f"def {signature}:", f"    if len(inputs) != {len(names)}: return None"]
    if names:
        lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = inputs")
    for k, _ in getattr(runner, "write_index", ()):  # the caller's tensor, even where copied below
        lines.append(f"    {caller_name(names, k)} = {names[k]}")
    checks, copies = [], []
    for k, (name, dtype, shape_fn) in enumerate(zip(names, runner.input_dtypes, runner.input_shapes)):
        d = src.const("D", dtype)
        s = src.const("S", torch.Size(shape_fn(*symvals)))
        stride = strides[k] if strides is not None and k < len(strides) else None
        if stride is None:
            layout = f"not {name}.is_contiguous()"
        else:
            layout = f"{name}.stride() != {src.const('T', stride)}"
            if k in (runner.dense_inputs if dense is None else dense):
                copies.append(f"    {name} = {name}.contiguous()")
        checks.append(f"{name}.dtype is not {d} or {name}.shape != {s} or {name}.get_device() != {device_index} "
                      f"or {layout}")
    if checks:  # the Python checks run where the inputs differ from those last accepted (input_guard.py)
        guard = src.const("G", InputGuard())
        lines.append(f"    if not {guard}.same(inputs):")
        for i in range(0, len(checks), 4):  # short lines keep the source readable in a traceback
            lines.append(f"        if {' or '.join(checks[i:i + 4])}: return None")
        lines.append(f"        {guard}.learn(inputs)")
    return lines + copies



def _extern_line(src: Source, step, var, symvals, runner, dev, device_type: str) -> str:
    call = _call(src, step, var, symvals, runner, dev, device_type)
    outs = [var[i] for i in step.outs]
    if not outs:
        return call
    if len(outs) == 1 and _returns_one_tensor(step.op):
        return f"{outs[0]} = {call}{'.contiguous()' if step.contiguous[0] else ''}"
    # as `ExternStep.__call__`: a sequence result binds one output per element, else the first
    parts = [f"_r = {call}", "_s = isinstance(_r, (tuple, list))"]
    for j, (o, contig) in enumerate(zip(outs, step.contiguous)):
        c = ".contiguous()" if contig else ""
        parts.append(f"{o} = _r[{j}]{c} if _s else " + (f"_r{c}" if j == 0 else "None"))
    # the tuple would keep every result alive past its own release (attention's output held
    # through the whole MLP: one activation above eager's peak)
    parts.append("_r = None")
    return "; ".join(parts)


def _reinterpret_line(src: Source, obj: Reinterpret, var, symvals, runner, dev, device_type: str) -> str:
    """`v = REINTERPRET(root, size, stride, offset)`; when the root's layout is not guaranteed,
    guarded by its stride, with the view calls it replaces as the fallback."""
    src.namespace["REINTERPRET"] = REINTERPRET
    made = f"REINTERPRET({var[obj.root]}, {src.const('S', obj.size)}, {src.const('T', obj.stride)}, {obj.offset})"
    if obj.root_stride is not None:
        fallback = var[obj.root]
        for view in obj.chain:  # view(view(root, ...), ...): the calls it replaces, innermost first
            fallback = _call(src, view, var, symvals, runner, dev, device_type, first=fallback)
            fallback += ".contiguous()" if view.contiguous[0] else ""
        made = f"{made} if {var[obj.root]}.stride() == {src.const('T', obj.root_stride)} else {fallback}"
    return f"{var[obj.outs[0]]} = {made}"


def _call(src: Source, step, var, symvals, runner, dev, device_type: str, first: str | None = None) -> str:
    """`E(args...)`: the extern call of `step` (its first argument replaced by `first` if given)."""
    ir_step = step.ir
    target, op, extra = ir_step.target, step.op, ()
    direct = direct_call(target, device_type)
    if direct is not None:  # a pipec.* target's ATen equivalent on this device, without the dispatcher hop
        op, extra = direct
        target = str(op)
    binding = python_binding(target) if direct is None else None  # the cheaper entry (extern_ops.py)
    op = src.const(f"E{_safe(target)}", binding or getattr(op, "_op", op))
    args = [_arg(src, v, var, runner, symvals, dev) for v in (get_attr(ir_step.attrs, "args", ()) or ())]
    if first is not None:
        args[0] = first
    for k, v in (*(get_attr(ir_step.attrs, "kwargs", ()) or ()), *extra):
        value = _arg(src, v, var, runner, symvals, dev)
        args.append(f"**{{{k!r}: {value}}}" if keyword.iskeyword(k) else f"{k}={value}")
    return f"{op}({', '.join(args)})"


def _returns_one_tensor(op) -> bool:
    try:
        returns = op._schema.returns
    except AttributeError:
        return False
    return len(returns) == 1 and str(returns[0].type) == "Tensor"


def _arg(src: Source, value, var, runner, symvals, dev) -> str:
    if isinstance(value, Ref):
        return var[runner.index[value.name]]
    if isinstance(value, Size):
        expr = value.value
        return str(int(expr)) if not expr.free_symbols else str(compile_ints([expr], runner.symbols)(*symvals)[0])
    if isinstance(value, Dtype):
        return src.const("D", TORCH_DTYPES[value.name])
    if isinstance(value, Device):
        return dev
    if isinstance(value, (tuple, list)):  # a fresh list per call: an op may keep it
        return "[" + ", ".join(_arg(src, v, var, runner, symvals, dev) for v in value) + "]"
    if value is None or isinstance(value, (bool, int)):
        return repr(value)
    return src.const("C", value)


def _safe(target: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in target)
