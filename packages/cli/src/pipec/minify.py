"""`pipec minify`: shrink a graph pipec gets wrong to a small standalone repro.

    minify_model(model, example_inputs, options) -> MinifyResult
    write_repro(result, "repro.py")   # repro.py (model + example_inputs), repro.pt, repro.graph.json

A graph *fails* when compiling it from fusion on raises (a compile error, named by its stage)
or when its outputs leave tolerance against eager and the float64 interpreter (the judge of
`pipec bisect`). Shrinking keeps a set of the graph's nodes (`subgraph`): a value a kept node
reads from a dropped node becomes a graph input holding that node's reference value, and the
kept nodes no kept node reads are the outputs. The set is shrunk by delta debugging (ddmin:
drop chunks, then single nodes, while the graph still fails the same way), the search the
fuzzer leaves to Hypothesis for its own programs, done here on the IR so it shrinks any
captured graph. A mismatch starts from the nodes of the first wrong kernel `pipec bisect`
finds, which is usually most of the way.
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import pipec_ir
from pipec_ir import CompileOptions, Device, Dtype, Graph, GraphInput, Node, Ref, Size, ref_names
from pipec_ir.types import ITEMSIZE

from .bisect import GraphCase, capture_cases, compile_plan, first_failure, judge, references
from .errors import find_pipec_error
from .pipeline import compile_graph


@dataclass(frozen=True)
class GraphFailure:
    kind: str  # "error" | "mismatch"
    stage: str | None  # the stage that raised (errors)
    message: str

    def same_as(self, other: GraphFailure | None) -> bool:
        return other is not None and (self.kind, self.stage) == (other.kind, other.stage)


def graph_failure(graph: Graph, values: dict[str, Any], options: CompileOptions) -> GraphFailure | None:
    """How `graph` fails when compiled (from fusion on) and run on `values` (by input name)."""
    inputs = [values[i.name] for i in graph.inputs]
    try:
        outs = compile_graph(graph, (), options)(inputs)
    except Exception as exc:  # noqa: BLE001 - any failure is what is being shrunk
        found = find_pipec_error(exc)
        text = str(found or exc).strip().splitlines()
        return GraphFailure("error", getattr(found, "stage", None) or "runtime",
                            f"{type(found or exc).__name__}: {text[0] if text else ''}")
    try:
        refs = references(GraphCase(graph.name, graph, inputs))
    except Exception:  # noqa: BLE001 - the interpreter refuses this subgraph: no judgement, no failure
        return None
    for name, out in zip(graph.outputs, outs):
        if name is not None:
            check = judge(name, out, refs)
            if check.problem:
                return GraphFailure("mismatch", None, check.problem)
    return None


# ---------------------------------------------------------------- subgraphs


def subgraph(graph: Graph, keep: set[str], values: dict[str, Any]) -> tuple[Graph, dict[str, Any]] | None:
    """The nodes of `keep` as a graph of their own (None when that is no valid graph): values
    they read from dropped nodes become inputs (their reference values), the kept nodes no
    kept node reads (and kept outputs of `graph`) its outputs."""
    nodes = graph.node_map()
    keep = {n for n in keep if n in nodes}
    # a getitem without its multi-result producer reads a tuple: it becomes an input instead
    keep = {n for n in keep if nodes[n].op != "getitem" or nodes[n].inputs[0] in keep}
    kept = [n for n in graph.nodes if n.name in keep]
    if not kept:
        return None
    read = {i for n in kept for i in n.inputs} | {r for n in kept for _, v in n.attrs for r in ref_names(v)}
    originals = {i.name: i for i in graph.inputs}
    inputs: list[GraphInput] = [i for i in graph.inputs if i.name in read]
    for name in dict.fromkeys(i for n in kept for i in (*n.inputs, *(r for _, v in n.attrs for r in ref_names(v)))):
        if name not in keep and name not in originals:
            if not isinstance(values.get(name), torch.Tensor):
                return None
            inputs.append(GraphInput(name, nodes[name].type))
    wanted = set(graph.outputs)
    outputs = tuple(n.name for n in kept if n.name not in read or n.name in wanted)
    sub = Graph(graph.name, tuple(inputs), tuple(kept), outputs, graph.symbols)
    try:
        pipec_ir.verify(sub)
    except pipec_ir.IRError:
        return None
    return sub, {i.name: values[i.name] for i in inputs}



def ddmin(items: list, fails: Callable[[list], bool]) -> list:
    """A smallest-found sublist of `items` that still `fails` (Zeller's delta debugging)."""
    n = 2
    while len(items) >= 2:
        size = -(-len(items) // n)
        chunks = [items[k:k + size] for k in range(0, len(items), size)]
        for chunk in chunks:
            if fails(chunk):
                items, n = chunk, 2
                break
        else:
            for chunk in chunks:
                rest = [x for x in items if x not in chunk]
                if fails(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
    return items


# ---------------------------------------------------------------- the whole shrink


@dataclass
class MinifyResult:
    model: str
    graph: Graph  # the smallest failing graph found
    inputs: dict[str, Any]  # its inputs, by name
    failure: GraphFailure
    original_nodes: int
    tests: int = 0  # graphs compiled while shrinking
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"model": self.model, "graph": self.graph.name, "nodes": len(self.graph.nodes),
                "original_nodes": self.original_nodes, "tests": self.tests,
                "failure": dataclasses.asdict(self.failure), "ir": pipec_ir.format_document(self.graph),
                "notes": list(self.notes)}


class NothingFails(Exception):
    """Every graph of the model compiles and runs within tolerance: nothing to shrink."""


def minify_graph(graph: Graph, values: dict[str, Any], options: CompileOptions, *,
                 start: set[str] | None = None, model: str = "model",
                 progress: Callable[[str], None] | None = None) -> MinifyResult:
    """Shrink `graph` (which fails with `options` on `values`: every value of its inputs and
    nodes, by name) to a small graph failing the same way. `start`: nodes to try first."""
    say = progress or (lambda message: None)
    options = dataclasses.replace(options, cache="none")  # dozens of throwaway graphs
    inputs = {i.name: values[i.name] for i in graph.inputs}
    target = graph_failure(graph, inputs, options)
    if target is None:
        raise NothingFails(f"graph {graph.name} does not fail")
    tried: dict[frozenset, bool] = {}
    best = [graph, inputs, target]

    def fails(names) -> bool:
        key = frozenset(names)
        if key not in tried:
            made = subgraph(graph, set(key), values)
            found = graph_failure(*made, options) if made is not None else None
            tried[key] = target.same_as(found)
            if tried[key] and len(made[0].nodes) < len(best[0].nodes):
                best[:] = [made[0], made[1], found]
                say(f"{len(made[0].nodes)} nodes still fail ({len(tried)} graphs tried)")
        return tried[key]

    order = [n.name for n in graph.nodes]
    items = order
    if start and fails([n for n in order if n in start]):
        items = [n for n in order if n in start]
    ddmin(items, fails)
    return MinifyResult(model, best[0], best[1], best[2], len(graph.nodes), len(tried))


def minify_model(model, example_inputs, options: CompileOptions, *, name: str = "model",
                 progress: Callable[[str], None] | None = None) -> MinifyResult:
    """Capture `model`, find its first graph that fails, shrink it."""
    say = progress or (lambda message: None)
    say("capturing")
    for case in capture_cases(model, example_inputs, options, name):
        refs = references(case)
        inputs = {i.name: t for i, t in zip(case.graph.inputs, case.inputs)}
        failure = graph_failure(case.graph, inputs, dataclasses.replace(options, cache="none"))
        if failure is None:
            continue
        start = None
        if failure.kind == "mismatch":  # bisect's first wrong kernel: its nodes are where to look
            plan, program = compile_plan(case.graph, options)
            wrong = first_failure(case, refs, plan, program, options)
            if wrong is not None and wrong.unit.kernel is not None:
                kernel = next((k for k in plan.kernels if k.name == wrong.unit.kernel), None)
                start = set(kernel.nodes) if kernel is not None else None
        say(f"{case.name}: {len(case.graph.nodes)} nodes fail ({failure.kind}); shrinking")
        graph = dataclasses.replace(case.graph, name=case.name)  # the name bisect and explain use
        return minify_graph(graph, refs.native, options, start=start, model=name, progress=say)
    raise NothingFails(f"{name}: every graph compiles and runs within tolerance: nothing to shrink")


# ---------------------------------------------------------------- the repro files


def write_repro(result: MinifyResult, path: Path, command: str = "pipec compile") -> list[Path]:
    """repro.py (`model` and `example_inputs`, in torch), repro.pt (the inputs) and
    repro.graph.json (the Graph: `pipec fuse repro.graph.json -o plan.json`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data, graph_file = path.with_suffix(".pt"), path.with_suffix(".graph.json")
    torch.save({n: t.detach().cpu() for n, t in result.inputs.items()}, data)
    graph_file.write_text(pipec_ir.dumps(result.graph))
    path.write_text(repro_source(result, data.name, f"{command} {path.name}"))
    return [path, data, graph_file]


def repro_source(result: MinifyResult, data_file: str, command: str) -> str:
    graph = result.graph
    names = _Names()
    params = [names(i.name) for i in graph.inputs]
    body = []
    device = params[0] + ".device" if params else "'cpu'"
    for node in graph.nodes:
        body.append(f"    {names(node.name)} = {torch_expression(node, names, device)}  # {node.type}")
    outs = [names(o) if o is not None else "None" for o in graph.outputs]
    failure = result.failure
    doc = (f'"""pipec minify: {len(graph.nodes)} of the {result.original_nodes} nodes of graph {graph.name} '
           f'(model {result.model}) that still fail.\n\n'
           f"{failure.kind}{f' in {failure.stage}' if failure.stage else ''}: {failure.message}\n\n"
           f"Reproduce: {command}. The inputs are in {data_file}; the\n"
           f'pipec Graph is in {Path(data_file).with_suffix(".graph.json").name}.\n"""\n')
    return "\n".join([
        doc, "import pathlib", "", "import torch", "", "",
        f"def model({', '.join(params)}):",
        *body,
        f"    return ({', '.join(outs)},)", "", "",
        "def example_inputs():",
        f"    saved = torch.load(pathlib.Path(__file__).with_name({data_file!r}), weights_only=True)",
        f"    return tuple(saved[name] for name in {tuple(i.name for i in graph.inputs)!r})", ""])


class _Names:
    """IR value names as Python identifiers."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        if name not in self.names:
            py = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
            if not py.isidentifier() or keyword.iskeyword(py) or py in ("torch", "pathlib", "model"):
                py = f"v_{py}"
            while py in self.names.values():
                py += "_"
            self.names[name] = py
        return self.names[name]


def _torch_dtype(name: str) -> str:
    """torch's spelling of an IR dtype: the IR names dtypes as torch does (pipec_ir.types.ITEMSIZE)."""
    if name not in ITEMSIZE:
        raise KeyError(name)
    return f"torch.{name}"


_FUNCTIONAL = {"silu": "torch.nn.functional.silu", "relu": "torch.relu", "identity": "torch.clone"}
_REDUCTIONS = {"max": "torch.amax", "min": "torch.amin"}


def _shape(type_) -> str:
    return "(" + "".join(f"{int(d)}, " for d in type_.shape) + ")"


def torch_expression(node: Node, names: _Names, device: str) -> str:
    """`node` as a torch expression over the Python names of its inputs."""
    from pipec_ir.ops import OPS

    xs = [names(i) for i in node.inputs]
    dtype = _torch_dtype(node.type.dtype)
    op, kind = node.op, OPS[node.op].kind
    attr = node.attr
    if op == "cast":
        return f"{xs[0]}.to({dtype})"
    if op == "where":
        return f"torch.where({xs[0]}, {xs[1]}, {xs[2]})"
    if op == "gelu":
        return f"torch.nn.functional.gelu({xs[0]}, approximate={attr('approximate')!r})"
    if op == "truediv_floor":
        return f"torch.div({xs[0]}, {xs[1]}, rounding_mode='floor')"
    if op == "div" and not node.type.dtype.startswith(("float", "bfloat")):
        return f"torch.div({xs[0]}, {xs[1]}, rounding_mode='trunc')"
    if kind == "pointwise" and op != "rand":
        return f"{_FUNCTIONAL.get(op, f'torch.{op}')}({', '.join(xs)})"
    if kind == "reduction":
        dims, keep = tuple(attr("dims")), bool(attr("keepdim"))
        if op in ("sum", "prod") or op in _REDUCTIONS or op == "any":
            if op == "prod":
                expr = xs[0]
                for d in sorted(dims, reverse=True):
                    expr = f"torch.prod({expr}, {d}, keepdim={keep})"
                return expr
            fn = {"sum": "torch.sum", "any": "torch.any"}.get(op, _REDUCTIONS.get(op))
            return f"{fn}({xs[0]}, {dims}, keepdim={keep})"
        if len(dims) == 1:  # argmax / argmin
            return f"torch.{op}({xs[0]}, {dims[0]}, keepdim={keep})"
    if op == "reshape":
        return f"{xs[0]}.reshape{_shape(node.type)}"
    if op == "permute":
        return f"{xs[0]}.permute{tuple(attr('dims'))}"
    if op == "expand":
        return f"{xs[0]}.expand{_shape(node.type)}"
    if op == "slice" and not isinstance(attr("start"), Size):
        dim, start, step = attr("dim"), attr("start"), attr("step")
        length = int(node.type.shape[dim])
        return f"torch.ops.aten.slice.Tensor({xs[0]}, {dim}, {start}, {start + step * max(length - 1, 0) + 1}, {step})"
    if op == "select" and not isinstance(attr("index"), Size):
        return f"{xs[0]}.select({attr('dim')}, {attr('index')})"
    if op == "full" and not isinstance(attr("value"), Size):
        return f"torch.full({_shape(node.type)}, {attr('value')!r}, dtype={dtype}, device={device})"
    if op == "iota":
        dim, shape = attr("dim"), [int(d) for d in node.type.shape]
        work = "torch.float64" if node.type.dtype.startswith(("float", "bfloat")) else "torch.int64"
        view = tuple(shape[d] if d == dim else 1 for d in range(len(shape)))
        return (f"({attr('start')!r} + {attr('step')!r} * torch.arange({shape[dim]}, dtype={work}, device={device}))"
                f".to({dtype}).reshape{view}.expand{_shape(node.type)}.contiguous()")
    if op == "mm":
        return f"torch.mm({xs[0]}, {xs[1]})"
    if op == "bmm":
        return f"torch.bmm({xs[0]}, {xs[1]})"
    if op == "take":
        return f"{xs[0]}.reshape(-1)[{xs[1]}.long()]"
    if op == "scan" and attr("combine") in ("add", "mul", "logaddexp"):
        fn = {"add": "torch.cumsum", "mul": "torch.cumprod", "logaddexp": "torch.logcumsumexp"}[attr("combine")]
        return f"{fn}({xs[0]}, {attr('dim')}).to({dtype})"
    if op == "extern":
        args = ", ".join(_literal(v, names, device) for v in attr("args"))
        kwargs = "".join(f", {k}={_literal(v, names, device)}" for k, v in attr("kwargs"))
        return f"torch.ops.{attr('target')}({args}{kwargs})".replace("(, ", "(")
    if op == "getitem":
        return f"{xs[0]}[{attr('index')}]"
    raise ValueError(f"pipec minify cannot write node {node.name} ({op}) as torch code yet")


def _literal(value, names: _Names, device: str) -> str:
    if isinstance(value, Ref):
        return names(value.name)
    if isinstance(value, Dtype):
        return _torch_dtype(value.name)
    if isinstance(value, Device):
        return device
    if isinstance(value, Size):
        return str(int(value.value))
    if isinstance(value, tuple):
        return "[" + ", ".join(_literal(v, names, device) for v in value) + "]"
    return repr(value)
