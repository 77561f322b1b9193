"""The stages one at a time, through IR files: `pipec capture`, `pipec fuse`, `pipec codegen`.
`capture --exporter dynamo` runs the model under torch.compile and keeps the one graph Dynamo
hands over, stopping the pipeline after the capture stage."""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Annotated

import typer

import pipec_ir

from ..errors import PipecError, find_pipec_error
from ..exits import fail, one_line
from ..model_file import load_model_file
from ..render import stderr
from .arguments import CodegenOpt, DynamicOpt, Exporter, FusionOpt, InputsNameOpt, ModelFile, ModelNameOpt, options_or_exit


def _read_ir(path: Path, kind: str):
    try:
        text = Path(path).read_bytes()
    except FileNotFoundError:
        fail(f"{str(path)!r} not found")
    except OSError as exc:
        fail(f"cannot read {str(path)!r}: {exc.strerror or exc}")
    try:
        return pipec_ir.loads(text, kind=kind)  # verified too
    except pipec_ir.IRError as exc:
        fail(f"{path}: {exc}")


def _write_ir(path: Path, doc) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pipec_ir.dumps(doc))
    except OSError as exc:
        fail(f"cannot write {str(path)!r}: {exc.strerror or exc}")


def _run_stage(source, example_inputs, options, stop_after: str, name: str | None = None):
    from ..cache import CacheError
    from ..pipeline import compile_graph

    try:
        return compile_graph(source, example_inputs, options, name=name, stop_after=stop_after)
    except PipecError as exc:
        if os.environ.get("PIPEC_TRACEBACK"):
            traceback.print_exc()
        fail(str(exc), 2 if isinstance(exc, CacheError) else 1)  # an unusable cache is a usage error


OutputOpt = Annotated[Path, typer.Option("-o", "--output", help="Where to write the IR document (JSON).")]
TextOpt = Annotated[bool, typer.Option("--text", help="Also print the document's text form.")]


def capture_cmd(model_file: ModelFile, output: OutputOpt, exporter: Annotated[Exporter, typer.Option(
                    "--exporter", help="export (torch.export: one whole graph) or dynamo.")] = Exporter.export,
                dynamic: DynamicOpt = False, model: ModelNameOpt = "model",
                inputs: InputsNameOpt = "example_inputs", text: TextOpt = False) -> None:
    """Capture MODEL.py into a Graph IR file (parameters become named inputs)."""
    options = options_or_exit(capture=exporter.value, dynamic=True if dynamic else None, fullgraph=True)
    module, example, name = load_model_file(model_file, model, inputs)
    if exporter is Exporter.export:
        graph = _run_stage(module, example, options, "capture", name=name)
    else:
        graph = _capture_with_dynamo(module, example, options, name)
    _write_ir(output, graph)
    params = sum(1 for i in graph.inputs if i.role != "input")
    stderr.print(f"wrote {output}: graph {graph.name}, {len(graph.inputs)} inputs ({params} parameters/buffers), "
                 f"{len(graph.nodes)} nodes")
    if text:
        print(pipec_ir.format_document(graph))


def _capture_with_dynamo(module, example, options, name: str):
    import torch

    from ..backend import aten_backend
    from ..pipeline import compile_graph
    from ..plugins import get_registry

    graphs = []
    capture = get_registry().get("capture", options.capture)
    if not hasattr(capture, "dynamo_backend"):
        fail(f"capture {options.capture!r} has no dynamo_backend")

    def compile_aten_graph(aten_gm, aten_inputs, kind="inference"):
        graphs.append(compile_graph(aten_gm, aten_inputs, options, name=name, stop_after="capture"))
        return lambda args: list(_as_tuple(aten_gm(*args)))

    def backend(gm, example_inputs, **_):
        return aten_backend(capture.dynamo_backend, compile_aten_graph, options)(gm, example_inputs)

    try:
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(module, backend=backend, fullgraph=True, dynamic=options.dynamic)(*example)
    except Exception as exc:
        found = find_pipec_error(exc)
        fail(str(found) if found else f"capturing {name} failed: {one_line(exc)}", 1)
    finally:
        torch._dynamo.reset()
    if len(graphs) != 1:
        fail(f"{name}: dynamo captured {len(graphs)} graphs, expected one (try --exporter export)", 1)
    return graphs[0]


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def fuse_cmd(graph_file: Annotated[Path, typer.Argument(help="Graph IR file (from `pipec capture`).",
                                                        show_default=False)],
             output: OutputOpt, fusion: FusionOpt = "default", text: TextOpt = False) -> None:
    """Partition a Graph into kernels: Graph JSON -> KernelPlan JSON."""
    graph = _read_ir(graph_file, "graph")  # a bad file is reported before any plugin loads
    options = options_or_exit(fusion=fusion)
    plan = _run_stage(graph, (), options, "fusion")
    _write_ir(output, plan)
    stderr.print(f"wrote {output}: {len(plan.kernels)} kernels, {len(plan.fusions)} fusions, "
                 f"{len(plan.rejected)} rejected (policy {plan.policy!r})")
    if text:
        print(pipec_ir.format_document(plan))


def codegen_cmd(plan_file: Annotated[Path, typer.Argument(help="KernelPlan IR file (from `pipec fuse`).",
                                                          show_default=False)],
                output: OutputOpt, codegen: CodegenOpt = "triton", text: TextOpt = False) -> None:
    """Generate code for a KernelPlan: KernelPlan JSON -> Program JSON."""
    plan = _read_ir(plan_file, "kernel_plan")
    options = options_or_exit(codegen=codegen)
    program = _run_stage(plan, (), options, "codegen")
    _write_ir(output, program)
    stderr.print(f"wrote {output}: {len(program.kernels)} Triton kernels, {len(program.steps)} steps")
    if text:
        print(pipec_ir.format_document(program))
