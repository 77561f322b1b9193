"""`pipec bisect`: which kernel of a compiled model is wrong, and which fusion made it wrong.

    bisect_model(model, example_inputs, options) -> BisectReport

1. capture_cases: the model runs once under torch.compile with a backend that lowers each
   Dynamo graph to a pipec Graph and, when the graph is called, keeps the tensors it got and
   eager's value of every ATen node (torch.fx.Interpreter): eager's intermediate values, by
   name, for the Graph nodes named after them. The graph returns eager's outputs, so a later
   graph is fed what eager feeds it.
2. references: the Graph's reference interpreter (pipec_capture.reference) at the graph's own
   dtypes (what each kernel is fed) and in float64 (the judge of low-precision values).
3. first_failure: the Program is cut into units (one launch or extern step; the steps of one
   KernelPlan kernel or one choice group together). Each unit runs alone through the launch
   runtime, as a Program of its own (`unit_program`), on the reference values of what it
   reads; every value it writes is judged against eager (else the interpreter) with the
   dtype's tolerances, and against float64 where those fail (compare_outputs, as `pipec
   compile` judges outputs). The first unit out of tolerance is the culprit. When every unit
   is right alone but the outputs are not, the units run again chained on pipec's own values,
   to find where the error grows out of tolerance.
4. narrow: the graph is compiled again with the fusion option `fusion_fuel=N` (only the first
   N merges, pipec_fusion.engine) and bisected over N: the smallest N that fails names the
   merge that breaks numerics; when N=0 (nothing fused) fails, one op's own kernel is wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import pipec_ir
from pipec_ir import CompileOptions, Dtype, Graph, KernelPlan, Program, TensorType
from pipec_ir.text import format_node
from pipec_ir.types import FLOAT_DTYPES

from .api import compare_outputs
from .backend import aten_backend
from .bisect_units import Unit, program_units, run_unit, runtime_options, unit_program
from .graph_call import tensors_only
from .constants import bind_constants, graph_constants
from .pipeline import Session, compile_graph, is_compute
from .plugins import get_registry


# ---------------------------------------------------------------- capture


@dataclass
class GraphCase:
    """One Dynamo graph of the model: its pipec Graph and what it was called with."""
    name: str
    graph: Graph
    inputs: list | None = None  # the Graph's inputs at the call (its tensor constants included)
    eager: dict[str, Any] = field(default_factory=dict)  # eager's value of each ATen node, by name


def capture_cases(model, example_inputs, options: CompileOptions, name: str = "model") -> list[GraphCase]:
    """Run `model` once under torch.compile, lowering each graph to a pipec Graph (capture stage
    only) and recording each graph's inputs and eager values at its call."""
    registry = get_registry()
    capture = registry.get("capture", options.capture)
    dynamo_backend = getattr(capture, "dynamo_backend", None)
    if dynamo_backend is None:
        raise ValueError(f"capture {options.capture!r} cannot run under torch.compile (it has no dynamo_backend)")
    cases: list[GraphCase] = []
    session = Session()

    def compile_aten_graph(aten_gm, aten_inputs, kind="inference"):
        label = f"{name}_{len(cases)}"
        graph = compile_graph(aten_gm, aten_inputs, options, session=session, name=label, stop_after="capture")
        case = GraphCase(label, graph)
        cases.append(case)

        def keep(graph_inputs):
            case.inputs = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in graph_inputs]
            return []

        record = tensors_only(bind_constants(keep, graph, graph_constants(capture, aten_gm, graph)), aten_inputs)

        def call(args):
            outputs, case.eager = _eager_values(aten_gm, args)
            record(list(args))
            return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]

        return call

    def backend(gm, example, **_):
        return aten_backend(dynamo_backend, compile_aten_graph, options)(gm, example)

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=backend, fullgraph=options.fullgraph, dynamic=False)(*example_inputs)
    finally:
        torch._dynamo.reset()
    return [c for c in cases if c.inputs is not None]


def _eager_values(gm: torch.fx.GraphModule, args) -> tuple[Any, dict[str, Any]]:
    """(gm's outputs, {fx node name: its value}) of one eager run of the ATen graph."""
    values: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n.name] = result
            return result

    with torch.no_grad():
        outputs = Recorder(gm).run(*args)
    return outputs, values


# ---------------------------------------------------------------- references


def float64_graph(graph: Graph) -> Graph:
    """`graph` with every floating dtype (value types and Dtype attributes) made float64."""
    def promote(t: TensorType) -> TensorType:
        return TensorType(t.shape, "float64") if t.dtype in FLOAT_DTYPES else t

    def attr(v):
        if isinstance(v, Dtype) and v.name in FLOAT_DTYPES:
            return Dtype("float64")
        if isinstance(v, tuple):
            return tuple(attr(x) for x in v)
        return v

    return dataclasses.replace(
        graph, inputs=tuple(dataclasses.replace(i, type=promote(i.type)) for i in graph.inputs),
        nodes=tuple(dataclasses.replace(n, type=promote(n.type), attrs=tuple((k, attr(v)) for k, v in n.attrs))
                    for n in graph.nodes))


@dataclass
class References:
    native: dict[str, Any]  # every value at the graph's own dtypes (interpreter)
    exact: dict[str, Any] | None  # in float64 (None: the graph has no float64 run)
    eager: dict[str, Any]  # eager's values of the nodes named after ATen nodes (same shape and dtype)


def references(case: GraphCase) -> References:
    from pipec_capture.reference import Evaluator

    ev = Evaluator(case.graph, case.inputs)
    ev.run()
    exact = None
    try:
        inputs64 = [t.to(torch.float64) if t.is_floating_point() else t for t in case.inputs]
        ev64 = Evaluator(float64_graph(case.graph), inputs64, strict=False)
        ev64.run()
        exact = ev64.env
    except Exception:  # noqa: BLE001 - an op without float64 support: eager's tolerances alone judge
        exact = None
    eager = {}
    for node in case.graph.nodes:
        value, own = case.eager.get(node.name), ev.env.get(node.name)
        if isinstance(value, torch.Tensor) and isinstance(own, torch.Tensor) and \
                value.shape == own.shape and value.dtype == own.dtype:
            eager[node.name] = value
    return References(ev.env, exact, eager)


# ---------------------------------------------------------------- judging values


@dataclass
class ValueCheck:
    name: str
    max_error: float | None
    problem: str | None  # None: within tolerance
    judged_by: str  # "eager" | "interpreter"


def judge(name: str, value, refs: References) -> ValueCheck:
    """`value` of graph value `name` against eager's (else the interpreter's) with the dtype's
    tolerances, then against float64 where those fail (the rule of `pipec compile`)."""
    expected = refs.eager.get(name)
    by = "eager" if expected is not None else "interpreter"
    if expected is None:
        expected = refs.native[name]
    exact = refs.exact.get(name) if refs.exact is not None else None
    reference = (lambda: [exact]) if isinstance(exact, torch.Tensor) else None
    err, problem = compare_outputs([value], [expected], reference=reference)
    if problem is not None:
        problem = problem.replace("output 0", name, 1)
        if by == "interpreter":  # eager has no value of this name: the interpreter stood in for it
            problem = problem.replace("eager", "the interpreter")
    return ValueCheck(name, err, problem, by)


# ---------------------------------------------------------------- finding the first wrong unit


@dataclass
class Failure:
    graph: str
    unit: Unit
    checks: list[ValueCheck]
    values: dict[str, Any]  # the unit's inputs, as it was fed them
    got: dict[str, Any]
    how: str  # "alone" (on reference inputs) | "chained" (on pipec's own values)
    error: str | None = None  # the unit raised instead

    @property
    def problem(self) -> str:
        if self.error:
            return self.error
        return next(c.problem for c in self.checks if c.problem)

    @property
    def max_error(self) -> float | None:
        errs = [c.max_error for c in self.checks if c.max_error is not None]
        return max(errs) if errs else None


def first_failure(case: GraphCase, refs: References, plan: KernelPlan | None, program: Program,
                  options: CompileOptions, *, chained: bool = False) -> Failure | None:
    """The first unit whose values leave tolerance, run alone on the reference values of its
    inputs (or, `chained`, on what pipec's earlier units made)."""
    own: dict[str, Any] = {i.name: t for i, t in zip(case.graph.inputs, case.inputs)}
    for unit in program_units(program, plan):
        source = own if chained else refs.native
        missing = [n for n in unit.reads if n not in source]
        if missing:  # a library result made by another unit: only a chained run has it
            if chained:
                raise RuntimeError(f"unit {unit.index} reads {missing[0]}, which no earlier step wrote")
            continue
        fed = {n: source[n] for n in unit.reads}
        try:
            got = run_unit(program, unit, fed, options)
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot run is the culprit too
            first = str(exc).strip().splitlines()
            return Failure(case.name, unit, [], fed, {}, "chained" if chained else "alone",
                           f"running it failed: {type(exc).__name__}: {first[0] if first else ''}")
        own.update({n: v for n, v in got.items() if v is not None})
        checks = [judge(n, got[n], refs) for n in _judged(unit, plan)
                  if isinstance(refs.native.get(n), torch.Tensor) and n in got]
        if any(c.problem for c in checks):
            return Failure(case.name, unit, checks, fed, got, "chained" if chained else "alone")
    return None


def _judged(unit: Unit, plan: KernelPlan | None) -> tuple[str, ...]:
    """The values a unit must write: those that are KernelPlan kernels' outputs (a choice group's
    alternatives also make values of their own, which only they read; a combo launch writes the
    outputs of several kernels), else all it writes."""
    if plan is None or not any(k.name == unit.kernel for k in plan.kernels):
        return unit.writes
    planned = {o for k in plan.kernels for o in k.outputs}
    return tuple(n for n in unit.writes if n in planned)


def program_outputs_check(case: GraphCase, refs: References, program: Program,
                          options: CompileOptions) -> list[ValueCheck]:
    """The whole Program run as the runtime runs it (memory plan included), outputs judged."""
    from pipec_runtime_cudagraph import load_launch

    outs = load_launch(program, runtime_options(options))(list(case.inputs))
    names = case.graph.outputs
    return [judge(n, o, refs) for n, o in zip(names, outs) if isinstance(refs.native.get(n), torch.Tensor)]


# ---------------------------------------------------------------- compiling a graph


def compile_plan(graph: Graph, options: CompileOptions) -> tuple[KernelPlan, Program]:
    plan = compile_graph(graph, (), options, stop_after="fusion")
    program = compile_graph(plan, (), options, stop_after="codegen")
    return plan, program


# ---------------------------------------------------------------- the report


@dataclass
class Narrowing:
    """What rationing the fusions (fusion_fuel) showed."""
    verdict: str  # "op" | "merge" | "recompute" | "not-fusion"
    total_merges: int
    fuel: int | None = None  # the smallest fuel that fails ("merge")
    merge: dict | None = None  # that merge: first/second nodes and ops, kind, kernel
    kernel: dict | None = None  # the failing kernel at that fuel (or with no fusion: "op")
    passing_kernels: list[dict] = field(default_factory=list)  # at fuel - 1, the kernels it merged
    compiles: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class BisectReport:
    model: str
    graphs: list[str]
    diverged: bool
    graph: str | None = None
    kernel: dict | None = None  # the first kernel out of tolerance
    how: str | None = None  # "alone" | "chained" | "program"
    outputs: list[dict] = field(default_factory=list)  # the failing graph's outputs, judged
    repro: str | None = None  # the .pt file with the kernel's inputs
    narrowing: Narrowing | None = None
    summary: str = ""

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["narrowing"] = self.narrowing.to_dict() if self.narrowing else None
        return data


def kernel_info(failure: Failure | None, plan: KernelPlan, program: Program, unit: Unit | None = None) -> dict:
    """The unit's KernelPlan kernel: IR nodes, ops, merges, Triton sources, and the error."""
    unit = unit or failure.unit
    nodes = plan.graph.node_map()
    name = unit.kernel
    wrong = [c.name for c in failure.checks if c.problem] if failure is not None else []
    if wrong:  # a combo launch runs several kernels: the one that wrote the first wrong value
        name = next((k.name for k in plan.kernels if wrong[0] in k.outputs), name)
    kernel = next((k for k in plan.kernels if k.name == name), None)
    members = kernel.nodes if kernel else tuple(n for n in unit.writes if n in nodes)
    triton = program.kernel_map()
    launched = list(dict.fromkeys(s.target for s in unit.steps if s.kind == "launch"))
    info = {
        "name": (kernel.name if kernel else unit.kernel) or unit.steps[0].target,
        "kind": kernel.kind if kernel else unit.steps[0].kind,
        "ops": [nodes[n].op for n in members if n in nodes and is_compute(nodes[n])],
        "ir": [format_node(nodes[n]) for n in members if n in nodes],
        "merges": [{"first": list(f.first), "second": list(f.second), "kind": f.kind}
                   for f in plan.fusions if kernel and f.kernel == kernel.name],
        "steps": [f"{s.kind} {s.target}" for s in unit.steps],
        "sources": {k: triton[k].source for k in launched if k in triton},
    }
    if failure is not None:
        info.update(problem=failure.problem, max_error=failure.max_error,
                    values=[dataclasses.asdict(c) for c in failure.checks])
    return info


def save_repro(path: Path, failure: Failure, program: Program) -> Path:
    """The unit as a Program of its own, its inputs, pipec's outputs and the references: replay
    with `pipec.bisect.replay(path)`."""
    sub = unit_program(program, failure.unit)
    path.parent.mkdir(parents=True, exist_ok=True)
    cpu = {n: t.detach().cpu() if isinstance(t, torch.Tensor) else t for n, t in failure.values.items()}
    torch.save({"format": "pipec-bisect-repro", "program": pipec_ir.dumps(sub), "inputs": cpu,
                "got": {n: t.detach().cpu() for n, t in failure.got.items() if isinstance(t, torch.Tensor)},
                "problem": failure.problem}, path)
    return path


def replay(path, device: str = "cpu") -> dict[str, Any]:
    """Run a saved kernel (save_repro) on its saved inputs: {output name: tensor}."""
    from pipec_runtime_cudagraph import load_launch

    data = torch.load(path, weights_only=True)
    program = pipec_ir.loads(data["program"], kind="program")
    inputs = [data["inputs"][b.name].to(device) for b in program.inputs]
    return dict(zip(program.outputs, load_launch(program)(inputs)))


# ---------------------------------------------------------------- the whole bisection


Progress = Callable[[str], None]


def bisect_model(model, example_inputs, options: CompileOptions, *, name: str = "model",
                 repro_dir: Path | None = None, narrow: bool = True,
                 progress: Progress | None = None) -> BisectReport:
    say = progress or (lambda message: None)
    say("capturing")
    cases = capture_cases(model, example_inputs, options, name)
    report = BisectReport(name, [c.name for c in cases], diverged=False)
    for case in cases:
        say(f"{case.name}: references")
        refs = references(case)
        say(f"{case.name}: compiling")
        plan, program = compile_plan(case.graph, options)
        say(f"{case.name}: running {len(program.steps)} steps one by one")
        failure = first_failure(case, refs, plan, program, options)
        outputs = program_outputs_check(case, refs, program, options)
        outputs_wrong = any(c.problem for c in outputs)
        if failure is None and outputs_wrong:
            say(f"{case.name}: running the steps chained")
            failure = first_failure(case, refs, plan, program, options, chained=True)
        if failure is None and not outputs_wrong:
            continue
        report.diverged = True
        report.graph = case.name
        report.outputs = [dataclasses.asdict(c) for c in outputs]
        if failure is None:
            report.how = "program"
            bad = next(c for c in outputs if c.problem)
            report.summary = (f"graph {case.name}: every kernel is right on its own and chained, but the "
                              f"Program's outputs are not ({bad.problem}): suspect the memory plan or the runtime")
            return report
        report.how = failure.how
        report.kernel = kernel_info(failure, plan, program)
        if repro_dir is not None:
            stem = f"{case.name}.{report.kernel['name']}"
            report.repro = str(save_repro(Path(repro_dir) / f"{stem}.pt", failure, program))
        report.summary = _summary(case.name, report.kernel, failure.how)
        if narrow and failure.how == "alone":
            report.narrowing = narrow_fusion(case, refs, plan, options, say)
            report.summary += "; " + _narrowing_line(report.narrowing)
        return report
    report.summary = (f"{name}: every kernel of {len(cases)} graph{'s' if len(cases) != 1 else ''} "
                      f"is within tolerance")
    return report


def _summary(graph: str, kernel: dict, how: str) -> str:
    where = "on exact inputs" if how == "alone" else "fed pipec's own earlier values (errors accumulate)"
    ops = ", ".join(kernel["ops"]) or kernel["kind"]
    return f"graph {graph}: kernel {kernel['name']} ({ops}) is out of tolerance {where}: {kernel['problem']}"


def _narrowing_line(n: Narrowing) -> str:
    if n.verdict == "op":
        return (f"with no fusion at all kernel {n.kernel['name']} ({', '.join(n.kernel['ops'])}) is still "
                f"wrong: that op's code is wrong, not a fusion")
    if n.verdict == "merge":
        m = n.merge
        return (f"merge {n.fuel} of {n.total_merges} breaks numerics: {m['kind']} fusion of "
                f"[{', '.join(m['first_ops'])}] with [{', '.join(m['second_ops'])}] into {m['kernel']}")
    if n.verdict == "recompute":
        return "every merge is right; recomputing stored values (recompute_stored) breaks numerics"
    return "the fusion stage does not ration its merges (fusion_fuel): no narrowing"


def narrow_fusion(case: GraphCase, refs: References, plan: KernelPlan, options: CompileOptions,
                  say: Progress) -> Narrowing:
    """Bisect the number of merges allowed (fusion_fuel) for the smallest that fails."""
    total = len(plan.fusions)
    compiles = 0

    def attempt(fuel: int):
        nonlocal compiles
        compiles += 1
        say(f"{case.name}: fusion_fuel={fuel} of {total}")
        fueled = options.with_extra(fusion_fuel=fuel)
        p, prog = compile_plan(case.graph, fueled)
        return p, prog, first_failure(case, refs, p, prog, fueled)

    p0, prog0, f0 = attempt(0)
    if p0.fusions:
        return Narrowing("not-fusion", total, compiles=compiles)
    if f0 is not None:
        return Narrowing("op", total, fuel=0, kernel=kernel_info(f0, p0, prog0), compiles=compiles)
    pm, progm, fm = attempt(total)
    if fm is None:
        return Narrowing("recompute", total, compiles=compiles)
    lo, hi, found = 0, total, (pm, progm, fm)  # lo passes, hi fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p, prog, f = attempt(mid)
        if f is None:
            lo = mid
        else:
            hi, found = mid, (p, prog, f)
    p, prog, f = found
    nodes = plan.graph.node_map()
    decision = p.fusions[hi - 1]

    def ops(names):
        return [nodes[n].op for n in names if n in nodes and is_compute(nodes[n])]

    merge = {"first": list(decision.first), "second": list(decision.second), "kind": decision.kind,
             "kernel": decision.kernel, "first_ops": ops(decision.first), "second_ops": ops(decision.second)}
    before = []
    if hi - 1 >= 0:  # the kernels the merge joined, as they were (and passed) one merge earlier
        p_prev, prog_prev = compile_plan(case.graph, options.with_extra(fusion_fuel=hi - 1))
        compiles += 1
        wanted = set(decision.first) | set(decision.second)
        for unit in program_units(prog_prev, p_prev):
            kernel = next((k for k in p_prev.kernels if k.name == unit.kernel), None)
            if kernel is not None and wanted & set(kernel.nodes):
                before.append(kernel_info(None, p_prev, prog_prev, unit))
    return Narrowing("merge", total, fuel=hi, merge=merge, kernel=kernel_info(f, p, prog),
                     passing_kernels=before, compiles=compiles)


def format_report(report: BisectReport, *, sources: bool = True) -> str:
    """The report as text (what `pipec bisect` prints)."""
    lines = [f"pipec bisect · {report.model}: {len(report.graphs)} graph(s)"]
    if not report.diverged:
        lines.append(report.summary)
        return "\n".join(lines)
    lines.append(report.summary)
    k = report.kernel
    if k is not None:
        lines += ["", f"first kernel out of tolerance: {k['name']} ({k['kind']}) in graph {report.graph}"
                  f" [{'on exact inputs' if report.how == 'alone' else 'chained on pipec values'}]",
                  f"  error: {k['problem']}", f"  steps: {'; '.join(k['steps'])}",
                  f"  fused ops: {', '.join(k['ops']) or '-'}"]
        for m in k["merges"]:
            lines.append(f"  merge ({m['kind']}): {', '.join(m['first'])}  +  {', '.join(m['second'])}")
        lines.append("  IR:")
        lines += [f"    {ln}" for ln in k["ir"]]
        if sources:
            for kname, src in k["sources"].items():
                lines += [f"  Triton source of {kname}:"] + [f"    {ln}" for ln in src.rstrip().splitlines()]
    if report.repro:
        lines += ["", f"reproduce: the kernel's inputs are in {report.repro}",
                  f"  python -c \"import pipec.bisect as b; print(b.replay({report.repro!r}))\""]
    n = report.narrowing
    if n is not None:
        lines += ["", f"narrowing ({n.compiles} compiles with fusion_fuel): {_narrowing_line(n)}"]
        if n.verdict == "merge":
            for before in n.passing_kernels:
                lines.append(f"  before the merge (right): {before['name']} ({', '.join(before['ops'])})")
            lines.append(f"  after it (wrong): {n.kernel['name']} ({', '.join(n.kernel['ops'])}): {n.kernel['problem']}")
            if sources:
                for kname, src in n.kernel["sources"].items():
                    lines += [f"  Triton source of {kname}:"] + [f"    {ln}" for ln in src.rstrip().splitlines()]
    return "\n".join(lines)

