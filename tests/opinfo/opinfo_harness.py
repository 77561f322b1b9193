"""Run pipec over PyTorch's OpInfo database (`op_db`) and classify every op.

For each OpInfo entry and each of its sample inputs:
1. eager: call the op (a sample eager rejects is not counted);
2. trace it with make_fx *without* decompositions: the ATen overloads it dispatches to; those
   tagged `torch.Tag.core` are the Core ATen overloads this entry exercises (entries that
   exercise none are not part of the sweep);
3. compile it as pipec's torch.compile backend does (AOTAutograd with pipec's decompositions:
   a functionalized graph -> lower -> fuse -> codegen -> runtime, inside AOT's runtime wrapper),
   run it and compare with eager at the dtype's tolerances.

A sample is "generated" (every op ran as pipec code), "extern" (some op ran as an extern
fallback), "error" (a stage raised) or "wrong" (ran, but the result differs from eager). An
entry's status is its worst sample's. On a machine without a GPU the generated kernels run in
Triton's interpreter (libdevice calls and bf16 `tl.dot` included: the runtime binds
interpreter stand-ins for them).
"""

from __future__ import annotations

import functools
import math
import traceback
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

import pipec_ir

GENERATED, EXTERN, ERROR, WRONG = "generated", "extern", "error", "wrong"
RANK = {GENERATED: 0, EXTERN: 1, ERROR: 2, WRONG: 3}

# Ops whose OpInfo entries are not single ATen ops or cannot be compared: sweep-level skips.
SKIP_ENTRIES = {
    "empty": "uninitialized memory: no values to compare",
    "empty_like": "uninitialized memory: no values to compare",
    "new_empty": "uninitialized memory: no values to compare",
    "new_empty_strided": "uninitialized memory: no values to compare",
    "empty_strided": "uninitialized memory: no values to compare",
    "empty_permuted": "uninitialized memory: no values to compare",
}


@functools.cache
def core_overloads() -> frozenset[str]:
    """Every ATen overload tagged `torch.Tag.core` in the installed torch."""
    found = set()
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.core in op.tags:
                found.add(str(op))
    return frozenset(found)


def entry_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


@functools.cache
def op_db_entries() -> tuple:
    from torch.testing._internal.common_methods_invocations import op_db

    return tuple(op_db)


def entries(dtype: torch.dtype, device: str = "cpu") -> list:
    """OpInfo entries that support `dtype` on `device` (in op_db order, names unique)."""
    out, seen = [], set()
    for op in op_db_entries():
        name = entry_name(op)
        if name in seen or name in SKIP_ENTRIES:
            continue
        try:
            if dtype not in op.supported_dtypes(device):
                continue
        except Exception:  # noqa: BLE001 - an entry that cannot answer is not swept
            continue
        seen.add(name)
        out.append(op)
    return out


@dataclass
class SampleResult:
    status: str
    overloads: tuple[str, ...]  # Core ATen overloads the sample exercises
    externs: tuple[tuple[str, str], ...] = ()  # (ATen overload, reason) of each extern fallback
    detail: str = ""


@dataclass
class EntryResult:
    name: str
    status: str
    overloads: tuple[str, ...]
    samples: list[SampleResult] = field(default_factory=list)
    skipped: int = 0  # samples eager or tracing could not run

    @property
    def detail(self) -> str:
        worst = [s for s in self.samples if s.status == self.status]
        return worst[0].detail if worst else ""

    def to_dict(self) -> dict:
        return {
            "name": self.name, "status": self.status, "overloads": list(self.overloads),
            "skipped_samples": self.skipped, "detail": self.detail,
            "samples": [{"status": s.status, "overloads": list(s.overloads), "externs": [list(e) for e in s.externs],
                         "detail": s.detail} for s in self.samples],
        }


class NotSwept(Exception):
    """The sample cannot be part of the sweep (eager rejects it, no tensor input, ...)."""


def _call(op, sample, tensors, spec, widen=None):
    """op on the sample with `tensors` in place of its tensors; with `widen` (a half dtype),
    constant arguments naming that dtype (cumsum's `dtype=`) become float64 too, so a float64
    reference run is not rounded back to the dtype under test."""
    slots = [torch.float64 if widen is not None and s is widen else s for s in spec[1]]
    inp, args, kwargs = pytree.tree_unflatten(_fill(tensors, slots), spec[0])
    return op(inp, *args, **kwargs)


def _fill(tensors, slots):
    it = iter(tensors)
    return [next(it) if s is None else s for s in slots]


def flatten_sample(sample):
    """(tensor leaves, spec): the sample's tensors become graph inputs, the rest stays constant."""
    leaves, tree = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    slots = [None if isinstance(x, torch.Tensor) else x for x in leaves]
    return tensors, (tree, slots)


def _outputs(value) -> list:
    leaves = pytree.tree_leaves(value)
    if not leaves or any(not isinstance(x, torch.Tensor) for x in leaves):
        raise NotSwept(f"returns non-tensor values ({type(value).__name__})")
    return leaves


def is_random(overload: str) -> bool:
    """A random op (torch tags it nondeterministic_seeded): rand, bernoulli, dropout, ..."""
    from pipec_capture.reference import resolve_overload

    return torch.Tag.nondeterministic_seeded in resolve_overload(overload).tags


def traced_overloads(fn, tensors) -> tuple[str, ...]:
    gm = make_fx(fn, tracing_mode="real")(*tensors)
    return tuple(sorted({str(n.target) for n in gm.graph.nodes
                         if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)}))


def tolerances(dtype: torch.dtype) -> dict:
    # half types: one rounding of each intermediate may differ from eager's (pipec computes in fp32)
    return {torch.float16: dict(atol=1e-2, rtol=1e-2), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}.get(
        dtype, dict(atol=1e-5, rtol=1.3e-6) if dtype == torch.float32 else {})


def compile_pipec(fn):
    """fn compiled as pipec's torch.compile backend sees it -> (compiled fn, record).

    AOTAutograd (aot_function, as make_dynamo_backend's aot_autograd) traces fn with pipec's
    decompositions into a functionalized inference graph: the in-place steps of decompositions
    (matmul's squeeze_, rms_norm's add_) become out-of-place ops, an input the op mutates comes
    back as an extra output that AOT's runtime wrapper copies into the input, and outputs that
    alias inputs are regenerated as views. Each graph then runs through every pipec stage. The
    first call compiles: it fills record["graph"] (the lowered Graph).
    """
    from functorch.compile import aot_function
    from pipec_capture import core_decompositions

    record: dict = {}

    def compiler(gm, example_inputs):
        call, graph = _pipeline(gm, example_inputs)
        record["graph"] = graph
        call._boxed_call = True  # AOT passes one list (boxed calling convention)
        return call

    return aot_function(fn, fw_compiler=compiler, decompositions=core_decompositions()), record


def _pipeline(gm, example_inputs):
    """An ATen graph -> (runner(list of tensors) -> outputs, graph)."""
    from pipec import plugins
    from pipec_capture import constant_bindings, lower_graph

    from pipec import make_options

    registry = plugins.get_registry()
    options = make_options()  # the defaults (PIPEC_BOUNDS_CHECK=1: bounds-checked kernels, gpu_sanitize.sh)
    graph = _round_trip(lower_graph(gm, example_inputs, name="opinfo"), "graph")
    constants = constant_bindings(gm, graph)  # tensor constants of the trace: trailing inputs
    plan = _round_trip(registry.get("fusion", "default").fuse(graph, options), "kernel_plan")
    program = _round_trip(registry.get("codegen", "triton").generate(plan, options), "program")
    extra = [constants[i.name] for i in graph.inputs[len(example_inputs):]]
    program_fn = registry.get("runtime", "launch").load(program, options)
    return (lambda xs: program_fn([*xs, *extra])), graph


def _round_trip(doc, kind):
    return pipec_ir.verify(pipec_ir.loads(pipec_ir.dumps(doc), kind=kind))


def _externs(graph) -> tuple[tuple[str, str], ...]:
    from pipec_capture.lower_random import is_philox_seed  # the seed of generated random ops is no fallback

    return tuple((str(n.attr("target")), str(n.attr("reason", ""))) for n in graph.nodes
                 if n.op == "extern" and not is_philox_seed(n))


# what an output outside the tolerances may lose to float64 beyond 1.5x eager's own loss
REFERENCE_SLACK = {torch.float16: 1e-3, torch.bfloat16: 1e-3, torch.float32: 1e-5}


def compare(got, expected, dtype, reference=None) -> str | None:
    """None when pipec's outputs match eager's at the dtype's tolerances. A floating output
    outside them still passes when it is about as close as eager's to a float64 run of the
    same op (`reference()`; within 1.5x eager's error plus REFERENCE_SLACK): a cumsum whose
    partial sums cancel loses more than the tolerance in any order of additions, and eager's
    CPU attention (a flash kernel) and pipec's (matmuls and a softmax) round differently by
    more than float32's rtol of 1.3e-6; the question is only whether pipec lost more."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, eager has {len(expected)}"
    exact = None
    for k, (g, e) in enumerate(zip(got, expected)):
        try:
            torch.testing.assert_close(g, e, equal_nan=True, **(tolerances(e.dtype) if e.is_floating_point() else {}))
        except AssertionError as exc:
            problem = f"output {k}: {' '.join(str(exc).split())[:300]}"
            if reference is None or e.dtype not in REFERENCE_SLACK or g.shape != e.shape:
                return problem
            try:
                exact = exact if exact is not None else reference()
                r = exact[k].double()
            except Exception:  # noqa: BLE001 - no float64 run of this op: the eager comparison stands
                return problem
            ours, eagers = (g.double() - r).abs().nan_to_num(), (e.double() - r).abs().nan_to_num()
            if ours.max() > 1.5 * eagers.max() + REFERENCE_SLACK[e.dtype]:
                return f"{problem} (and further from float64 than eager: {ours.max():.3g} vs {eagers.max():.3g})"
    return None


def topk_problem(got, expected, x, sample, dtype) -> str | None:
    """topk leaves the order of equal values unspecified (and of all values when sorted=False),
    so its indices are checked by what they select: pipec's values must be `x` at pipec's
    indices, and equal eager's values once both are sorted."""
    dim = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("dim", -1)
    (values, indices), (want, _) = got, expected
    if x.dim() == 0:
        picked = x.expand(values.shape)
    else:
        picked = torch.gather(x, dim, indices)
    if not torch.equal(picked.nan_to_num(), values.nan_to_num()):
        return "topk: the values are not the input's values at the returned indices"
    d = dim if x.dim() else 0
    ours = values.sort(dim=d)[0] if values.dim() else values
    theirs = want.sort(dim=d)[0] if want.dim() else want
    return compare([ours], [theirs], dtype)


def run_sample(op, sample, dtype: torch.dtype, device: str) -> SampleResult:
    tensors, spec = flatten_sample(sample)
    if not tensors:
        raise NotSwept("no tensor inputs")
    if any(t.requires_grad for t in tensors):
        tensors = [t.detach() for t in tensors]

    def fn(*xs):
        return _call(op, sample, xs, spec)

    seed = 1234
    try:
        torch.manual_seed(seed)
        expected = _outputs(fn(*[t.clone() for t in tensors]))
        raw = traced_overloads(fn, [t.clone() for t in tensors])
        overloads = tuple(o for o in raw if o in core_overloads())
    except NotSwept:
        raise
    except Exception as exc:  # noqa: BLE001 - eager or plain tracing rejects this sample
        raise NotSwept(f"eager/trace: {type(exc).__name__}") from exc
    if not overloads:
        raise NotSwept("exercises no Core ATen overload")
    try:
        compiled, record = compile_pipec(fn)
        torch.manual_seed(seed)  # random externs draw from the generator state eager saw (tracing draws none)
        got = pytree.tree_leaves(compiled(*[t.clone() for t in tensors]))
        externs = _externs(record["graph"])
        got = [g for g in got if g is not None] if len(got) != len(expected) else list(got)
    except Exception as exc:  # noqa: BLE001 - any stage's failure is recorded, not raised
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return SampleResult(ERROR, overloads, detail=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
                                                     f"({last.filename.rsplit('/', 1)[-1]}:{last.lineno})")
    if any(is_random(o) for o in raw):
        # pipec's random ops draw Philox numbers from a seed (and externs may draw in another
        # order than eager's kernel): only shapes and dtypes are comparable
        got = [g.new_zeros(g.shape) for g in got]
        expected = [e.new_zeros(e.shape) for e in expected]
    def float64_outputs():
        wide = [t.double() if t.is_floating_point() else t.clone() for t in tensors]
        return _outputs(_call(op, sample, wide, spec, widen=dtype))

    if "aten.topk.default" in overloads and len(got) == 2 == len(expected):
        problem = topk_problem(got, expected, tensors[0], sample, dtype)
        got, expected = got[:0], expected[:0]  # compared above
        if problem is not None:
            return SampleResult(WRONG, overloads, externs, problem)
    problem = compare(got, expected, dtype, reference=float64_outputs)
    if problem is not None:
        return SampleResult(WRONG, overloads, externs, problem)
    status = EXTERN if externs else GENERATED
    detail = "; ".join(f"{t}: {r}" for t, r in externs)
    return SampleResult(status, overloads, externs, detail)


def run_entry(op, dtype: torch.dtype = torch.float32, device: str = "cpu", max_samples: int | None = None,
              seed: int = 0) -> EntryResult | None:
    """Sweep one OpInfo entry; None when it exercises no Core ATen overload."""
    torch.manual_seed(seed)
    result = EntryResult(entry_name(op), GENERATED, ())
    overloads: set[str] = set()
    try:
        samples = op.sample_inputs(device, dtype, requires_grad=False)
        for sample in samples:
            if max_samples is not None and len(result.samples) >= max_samples:
                break
            try:
                r = run_sample(op, sample, dtype, device)
            except NotSwept:
                result.skipped += 1
                continue
            overloads.update(r.overloads)
            result.samples.append(r)
    except Exception as exc:  # noqa: BLE001 - the entry's sample generator itself failed
        if not result.samples:
            return None if not overloads else result
        result.samples.append(SampleResult(ERROR, (), detail=f"sample inputs: {type(exc).__name__}"))
    if not result.samples:
        return None
    result.overloads = tuple(sorted(overloads))
    result.status = max((s.status for s in result.samples), key=RANK.__getitem__)
    return result


def overload_statuses(results: list[EntryResult]) -> dict[str, str]:
    """Each exercised Core ATen overload's status.

    An extern is charged to the overload it calls when the sample dispatched to that overload,
    else to the sample's overloads that pipec has no direct lowering for (their decompositions
    produced it). A wrong result anywhere makes the overload wrong. Otherwise the overload takes
    its best entry's status: it is generated if some entry runs it as generated code (an error
    in another entry is charged to that entry's own table row).
    """
    from pipec_capture import LOWERINGS

    worst: dict[str, str] = {}
    best: dict[str, str] = {}
    for entry in results:
        for s in entry.samples:
            charged = set()
            for target, _ in s.externs:
                if target in s.overloads:
                    charged.add(target)
                else:
                    charged.update(o for o in s.overloads if o not in LOWERINGS)
            for o in s.overloads:
                if s.status in (WRONG, ERROR):
                    st = s.status
                else:
                    st = EXTERN if o in charged else GENERATED
                worst[o] = max(worst.get(o, GENERATED), st, key=RANK.__getitem__)
                best[o] = min(best.get(o, WRONG), st, key=RANK.__getitem__)
    out = {}
    for o in worst:
        if worst[o] == WRONG:
            out[o] = WRONG
        elif worst[o] == EXTERN:
            out[o] = EXTERN
        else:
            out[o] = best[o]
    return out


def summary_line(entry_counts: dict[str, int], overload_counts: dict[str, int], dtype, device) -> str:
    total = sum(overload_counts.values())
    gen = overload_counts.get(GENERATED, 0)
    pct = 100.0 * gen / total if total else math.nan
    return (f"opinfo sweep ({dtype}, {device}): core overloads {total}: generated {gen} ({pct:.1f}%), "
            f"extern {overload_counts.get(EXTERN, 0)}, xfail {overload_counts.get(ERROR, 0)}, "
            f"wrong {overload_counts.get(WRONG, 0)} | entries: generated {entry_counts.get(GENERATED, 0)}, "
            f"extern {entry_counts.get(EXTERN, 0)}, xfail {entry_counts.get(ERROR, 0)}, "
            f"wrong {entry_counts.get(WRONG, 0)}")
