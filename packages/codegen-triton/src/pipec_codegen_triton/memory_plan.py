"""Memory plan: give kernel-written intermediates slots by liveness, reusing freed slots.

A buffer is live from the step that writes it to the last step that reads it.
Library calls may return views of their inputs, so an extern's inputs stay live
as long as its outputs do (except calls known to return fresh memory: matmuls,
convolution, attention). Graph outputs never share storage.

Reuse, in order of preference:
* in place: a pointwise kernel's output takes the slot of one of its inputs that dies
  at that kernel, when the input has the output's exact type and every node of the
  kernel reading it is pointwise (so element i is read at the index element i of the
  output is written, by the same program instance). The step says so with an
  `inplace` attribute (docs/IR.md, "In-place launches"): ((output, input), ...).
* best fit: the smallest slot freed before this step that holds the buffer.

The runtime allocates a slot's storage at the first step writing one of its buffers and
frees it after the last use of its last buffer; library (extern) results are allocated
by the library when produced and freed after their last use, as in eager. `peak_bytes`
is the largest number of bytes live at any step under that model (symbols at their
hints when the plan is compared, a sympy expression in the Program). A slot reused across
a gap holds memory nothing uses meanwhile, so the plan is kept only where its peak is no
higher than that of a slot per buffer (each held from its write to its last reader, in-place
pairs still sharing): the liveness bound of this step order, never above eager's (every
intermediate allocated when produced, freed after its last use).

* over a library result: a launch codegen proposes (`inplace`) to write its output over a
  library call's result (a matmul's epilogue kernel after cuBLAS) does, where the result dies
  there and was made in the same alternative; that output then has no slot of its own.
"""

from __future__ import annotations

import sympy
from pipec_ir import ITEMSIZE, Buffer, Slot, Step, TensorType
from pipec_ir.ops import POINTWISE_OPS
from pipec_ir.symbolic import numel, size_symbol
from pipec_ir.types import get_attr, make_attrs

ALIGN = 64

# Extern targets that return views of their first argument (no new memory).
_VIEW_OPS = frozenset({
    "reshape", "view", "_unsafe_view", "permute", "expand", "slice", "select", "t", "transpose", "as_strided",
    "unsqueeze", "squeeze", "alias", "narrow", "unfold", "diagonal", "view_as", "expand_as", "unbind", "split",
    "chunk", "split_with_sizes",
})


# Library calls whose results are always fresh memory, never a view of an argument: their
# arguments need not outlive the call (matmuls, convolution, attention, pipec's own targets).
_FRESH_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "_addmm_activation", "convolution", "scaled_dot_product_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_cudnn_attention",
    "_efficient_attention_forward", "_flash_attention_forward",
})


def _is_fresh(target: str) -> bool:
    parts = target.split(".")
    return parts[0] == "pipec" or (len(parts) >= 2 and parts[0] == "aten" and parts[1] in _FRESH_OPS)


def _nbytes(t: TensorType) -> sympy.Expr:
    raw = numel(t.shape) * ITEMSIZE[t.dtype]
    if raw.is_Integer:
        return sympy.Integer(-(-int(raw) // ALIGN) * ALIGN)
    return raw


def inplace_candidates(plan) -> dict[str, frozenset[str]]:
    """Kernel name -> the inputs its output may overwrite in place: pointwise kernels only,
    inputs read by pointwise nodes alone (no view, broadcast or index arithmetic on them)."""
    nodes = plan.graph.node_map()
    out: dict[str, frozenset[str]] = {}
    for kernel in plan.kernels:
        if kernel.kind != "pointwise":
            continue
        members = [nodes[n] for n in kernel.nodes if n in nodes]
        # a pointwise kernel computes every output before it stores any (writer._write_pointwise):
        # each program has read all of its inputs' elements before it writes one
        ok = set()
        for name in kernel.inputs:
            readers = [n for n in members if name in n.inputs]
            if readers and all(n.op in POINTWISE_OPS for n in readers):
                ok.add(name)
        if ok:
            out[kernel.name] = frozenset(ok)
    return out


def plan_program_memory(steps: tuple[Step, ...], types: dict[str, TensorType], outputs: set[str], plan=None):
    """The memory plan of a step list: (steps with `inplace` attrs, buffers with slots, slots,
    peak bytes). `plan` (the KernelPlan) enables in-place reuse and gives the symbols' hints."""
    inplace = inplace_candidates(plan) if plan is not None else {}
    hints = {size_symbol(s.name): s.hint for s in plan.graph.symbols} if plan is not None else {}
    best = None
    for reuse in (True, False):  # slots reused best-fit; or a slot per buffer (in-place pairs still share)
        buffers, slots, pairs = plan_memory(steps, types, outputs, inplace=inplace, reuse=reuse)
        marked = _mark_inplace(steps, pairs)
        planned = peak_bytes(marked, types, outputs, buffers, slots)
        if best is None or _at(planned, hints) < _at(best[3], hints):
            best = (marked, buffers, slots, planned)
    return best


def writes_in_place(steps: tuple[Step, ...], buffers: tuple[Buffer, ...], plan) -> tuple[tuple[Step, ...], tuple, set]:
    """(steps, buffers) with each written input (`Graph.writes`) stored by the launch computing
    its value, where that is safe: the value's one writer is a pointwise launch that reads the
    input only pointwise (or not at all: `inplace_candidates`), no later step reads the input,
    and the value is no graph output (which must not alias an input); or the value scatters
    into the input as it is (`_scatter_into`: the init launch goes). That launch's `inplace`
    names (value, input); the value's buffer has no slot (the runtime binds it to the input).
    The runtime copies the other written values into their inputs after the run. Third: the
    kernels no step launches any more (those init launches)."""
    graph = plan.graph
    if not graph.writes:
        return steps, buffers, set()
    candidates = inplace_candidates(plan)
    kinds = {k.name: k.kind for k in plan.kernels}
    outputs = set(o for o in graph.outputs if o is not None)
    writers: dict[str, list[int]] = {}
    last_read: dict[str, int] = {}
    for k, step in enumerate(steps):
        for o in step.outputs:
            writers.setdefault(o, []).append(k)
        for i in step.inputs:
            last_read[i] = k
    pairs: dict[int, list] = {}
    skipped: set[int] = set()
    nodes = graph.node_map()
    for target, value in graph.writes:
        at = writers.get(value, [])
        if value in outputs:
            continue
        if _scatter_into(nodes.get(value), target, at, steps, last_read):
            # a scatter whose base is the input (a KV cache's index_copy_): its init launch would
            # copy the input onto itself; the scatter launch writes into the input directly
            skipped.add(at[0])
            pairs.setdefault(at[1], []).append((value, target))
            continue
        if len(at) != 1:
            continue
        step = steps[at[0]]
        if step.kind != "launch" or kinds.get(step.target) != "pointwise":
            continue
        if last_read.get(target, -1) > at[0]:
            continue
        if last_read.get(target, -1) == at[0] and target not in candidates.get(step.target, ()):
            continue
        pairs.setdefault(at[0], []).append((value, target))
    if not pairs:
        return steps, buffers, set()
    bound = {value for more in pairs.values() for value, _ in more}
    out = []
    for k, step in enumerate(steps):
        if k in skipped:
            continue
        if k in pairs:
            attrs = {key: v for key, v in step.attrs}
            attrs["inplace"] = tuple(attrs.get("inplace", ()) or ()) + tuple(pairs[k])
            step = Step(step.kind, step.target, step.inputs, step.outputs, make_attrs(**attrs))
        out.append(step)
    dropped = {steps[k].target for k in skipped}
    return tuple(out), tuple(Buffer(b.name, b.type, None) if b.name in bound else b for b in buffers), dropped


def _scatter_into(node, target: str, at: list[int], steps, last_read: dict) -> bool:
    """Whether `node` scatters into input `target` as it is, through its two launches (the init
    copying `target` alone, then the scatter) and nothing reads `target` after the init."""
    if node is None or node.op != "scatter" or node.inputs[0] != target or len(at) != 2:
        return False
    init, body = steps[at[0]], steps[at[1]]
    return (init.kind == body.kind == "launch" and init.target == f"{body.target}_init"
            and init.inputs == (target,) and target not in body.inputs and last_read.get(target, -1) <= at[0])


def _mark_inplace(steps, pairs: dict[int, tuple]) -> tuple[Step, ...]:
    """`steps` with each launch's `inplace` attribute the pairs the plan confirmed (codegen's
    proposals the plan did not confirm are dropped)."""
    out = []
    for k, step in enumerate(steps):
        if k in pairs or get_attr(step.attrs, "inplace") is not None:
            attrs = {key: v for key, v in step.attrs if key != "inplace"}
            if k in pairs:
                attrs["inplace"] = tuple(pairs[k])
            step = Step(step.kind, step.target, step.inputs, step.outputs, make_attrs(**attrs))
        out.append(step)
    return tuple(out)


def _at(expr: sympy.Expr, hints: dict) -> int:
    value = sympy.sympify(expr).xreplace(hints) if hints else sympy.sympify(expr)
    if not value.is_number:  # a symbol without a hint: compare at 64 (a typical size)
        value = value.xreplace({s: 64 for s in value.free_symbols})
    return int(value)


def last_uses(steps: tuple[Step, ...], outputs: set[str]) -> dict[str, int]:
    """Value -> the last step its storage is needed (len(steps) for graph outputs); an
    extern's inputs live as long as its outputs (it may return views of them), unless it is a
    library call known to return fresh memory (`_is_fresh`)."""
    last_use: dict[str, int] = {}
    for i, step in enumerate(steps):
        for name in step.inputs:
            last_use[name] = i
        for name in step.outputs:
            last_use.setdefault(name, i)
    for name in outputs:  # returned values live past the last step
        last_use[name] = len(steps)
    for i in reversed(range(len(steps))):
        step = steps[i]
        if step.kind != "extern" or _is_fresh(step.target):
            continue
        end = max((last_use.get(o, i) for o in step.outputs), default=i)
        for name in step.inputs:
            last_use[name] = max(last_use.get(name, i), end)
    return last_use


def plan_memory(steps: tuple[Step, ...], types: dict[str, TensorType], outputs: set[str], *,
                inplace: dict[str, frozenset[str]] | None = None, reuse: bool = True):
    """Returns (buffers with slots, slots, {step index: ((output, input), ...) in place}).
    `reuse=False`: no slot is reused once freed (each buffer has its own, or its in-place
    input's), so each is held exactly from its write to its last reader."""
    inplace = inplace or {}
    last_use = last_uses(steps, outputs)
    free: list[tuple[sympy.Expr, int]] = []  # (nbytes, slot index) of freed slots
    slots: list[Slot] = []
    slot_of: dict[str, int] = {}
    live_until: dict[int, int] = {}
    buffers: list[Buffer] = []
    pairs: dict[int, list[tuple[str, str]]] = {}
    declared: set[str] = set()
    made_by: dict[str, Step] = {}  # value -> the extern step making it
    for step in steps:
        if step.kind == "extern" and not _is_view(step.target):
            for name in step.outputs:
                made_by.setdefault(name, step)
    over_results = [_over_library_result(step, i, made_by, types, last_use, outputs) for i, step in enumerate(steps)]
    # a value some alternative writes over a library result has no slot: the other alternatives
    # (the template's kernel) give it storage of its own, freed after its last reader, as a slot
    # held across that alternative would hold it beside the library result that now carries it
    unslotted = {out for over in over_results for out in over}
    for i, step in enumerate(steps):
        # release slots whose buffers died before this step
        for idx, end in list(live_until.items()):
            if end < i:
                if reuse:
                    free.append((slots[idx].nbytes, idx))
                del live_until[idx]
        # inputs of this step that die here and may be overwritten by its output
        # (never inside a choice group: the runtime re-runs an alternative to time it, and a
        # step that overwrote its input would then compute from its own output)
        dying = [name for name in step.inputs
                 if name in slot_of and name in inplace.get(step.target, ())
                 and get_attr(step.attrs, "choice") is None
                 and last_use.get(name) == i and live_until.get(slot_of[name]) == i]
        for out, donor in over_results[i].items():
            pairs.setdefault(i, []).append((out, donor))
        for out in step.outputs:
            if out in declared:  # another alternative of a choice group wrote it first: same buffer
                continue
            declared.add(out)
            t = types[out]
            if step.kind != "launch" or out in outputs or out in unslotted:
                buffers.append(Buffer(out, t, None))
                continue
            need = _nbytes(t)
            donor = next((name for name in dying if types[name] == t), None)
            if donor is not None:
                dying.remove(donor)
                idx = slot_of[donor]
                pairs.setdefault(i, []).append((out, donor))
            else:
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
    return tuple(buffers), tuple(slots), {k: tuple(v) for k, v in pairs.items()}


def _over_library_result(step: Step, i: int, made_by: dict, types: dict, last_use: dict, outputs: set) -> dict:
    """{output: library result} of a launch that codegen proposes (its `inplace` attribute) to
    write over a library call's result (a cuBLAS product before its epilogue kernel): kept where
    that result dies at this step, is not returned, has the output's dtype and element count, and
    was made in the same alternative of the same choice group (rerunning an alternative to time
    it calls the library again, so its result is never a value the timing overwrote)."""
    if step.kind != "launch":
        return {}
    out = {}
    for output, donor in tuple(get_attr(step.attrs, "inplace", ()) or ()):
        maker = made_by.get(donor)
        if (maker is None or donor in outputs or last_use.get(donor) != i or output not in step.outputs
                or types[donor].dtype != types[output].dtype
                or sympy.expand(numel(types[donor].shape) - numel(types[output].shape)) != 0
                or get_attr(maker.attrs, "choice") != get_attr(step.attrs, "choice")
                or get_attr(maker.attrs, "alternative") != get_attr(step.attrs, "alternative")):
            continue
        out[output] = donor
    return out


def peak_bytes(steps: tuple[Step, ...], types: dict[str, TensorType], outputs: set[str],
               buffers: tuple[Buffer, ...] | None = None, slots: tuple[Slot, ...] = ()) -> sympy.Expr:
    """The most bytes live at any step: values made by the steps (inputs not counted),
    views of other values free. Without `buffers`: eager (each value from the step making it
    to its last use). With them: slotted buffers cost their slot, from the first write of
    any buffer of the slot to the last use of its last buffer, and a launch's output written
    in place of a library result (`inplace`) costs nothing more. A call runs one alternative
    of each choice group: the peak is the largest over the alternatives."""
    names = list(dict.fromkeys(get_attr(s.attrs, "alternative") for s in steps if get_attr(s.attrs, "choice")))
    peaks = [_peak_of(_alternative_steps(steps, name), types, outputs, buffers, slots) for name in names or [None]]
    peaks = [p for p in peaks if p is not None]
    if not peaks:
        return sympy.Integer(0)
    return sympy.Max(*peaks) if len(peaks) > 1 else peaks[0]


def _alternative_steps(steps: tuple[Step, ...], alternative: str | None) -> tuple[Step, ...]:
    """The steps a call runs when each choice group runs `alternative` where it has one, else its
    default (else its first alternative)."""
    groups: dict[str, list[tuple[str, bool]]] = {}
    for s in steps:
        if get_attr(s.attrs, "choice") is not None:
            groups.setdefault(get_attr(s.attrs, "choice"), []).append(
                (get_attr(s.attrs, "alternative"), bool(get_attr(s.attrs, "default"))))
    picked = {g: alternative if any(a == alternative for a, _ in m) else next((a for a, d in m if d), m[0][0])
              for g, m in groups.items()}
    return tuple(s for s in steps if get_attr(s.attrs, "choice") is None
                 or get_attr(s.attrs, "alternative") == picked[get_attr(s.attrs, "choice")])


def _peak_of(steps, types, outputs, buffers, slots) -> sympy.Expr | None:
    last_use = last_uses(steps, outputs)
    slot_of = {b.name: b.slot for b in buffers or () if b.slot is not None}
    slot_bytes = {s.index: s.nbytes for s in slots}
    over: dict[str, str] = {}  # output written in place of a library result -> that result
    if buffers is not None:
        for step in steps:
            for output, donor in inplace_pairs(step):
                if donor not in slot_of:
                    over[output] = over.get(donor, donor)
    span: dict[object, list] = {}  # allocation -> [first step, last step, bytes]
    for k, step in enumerate(steps):
        if step.kind == "extern" and _is_view(step.target):
            continue
        for name in step.outputs:
            if name not in types:
                continue
            end = last_use.get(name, k)
            if name in over:
                key = over[name]
                if key in span:
                    span[key][1] = max(span[key][1], end)
                continue
            key = ("slot", slot_of[name]) if name in slot_of else name
            nbytes = slot_bytes[slot_of[name]] if name in slot_of else _nbytes(types[name])
            if key in span:
                span[key][1] = max(span[key][1], end)
            else:
                span[key] = [k, end, nbytes]
    if not span:
        return None
    if all(getattr(n, "is_Integer", False) or type(n) is int for _, _, n in span.values()):
        return sympy.Integer(_int_peak(span.values(), len(steps)))
    totals = []
    for k in range(len(steps) + 1):
        live = [n for first, last, n in span.values() if first <= k <= last]
        if live:
            totals.append(sympy.Add(*live))
    return sympy.Max(*totals) if len(totals) > 1 else totals[0]


def _int_peak(spans, n_steps: int) -> int:
    """The largest sum of the byte counts live at one step (k in [first, last], k <= n_steps),
    for whole-number sizes: one sweep instead of a sympy sum per step (BERT base: ~0.4 s)."""
    delta = [0] * (n_steps + 2)
    for first, last, nbytes in spans:
        delta[first] += int(nbytes)
        delta[min(last, n_steps) + 1] -= int(nbytes)
    running, peak = 0, 0
    for k in range(n_steps + 1):
        running += delta[k]
        peak = max(peak, running)
    return peak


def _is_view(target: str) -> bool:
    parts = target.split(".")
    return len(parts) >= 2 and parts[0] == "aten" and parts[1] in _VIEW_OPS


def inplace_pairs(step: Step) -> tuple[tuple[str, str], ...]:
    """The (output, input) pairs a launch step writes in place (its `inplace` attribute)."""
    return tuple(get_attr(step.attrs, "inplace", ()) or ())


def _best_fit(free, need):
    """The smallest freed slot that holds `need` bytes. With symbolic sizes a slot is taken
    when it holds `need` for every value of the symbols (an exact match first); a slot of known
    size that holds `need` is preferred to a symbolic one that does (which is the smaller is
    unknown; the known one cannot grow with the symbols)."""
    best = None
    for nbytes, idx in free:
        if nbytes.is_Integer and need.is_Integer:
            if int(nbytes) >= int(need) and (best is None or not best[0].is_Integer or int(nbytes) < int(best[0])):
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
