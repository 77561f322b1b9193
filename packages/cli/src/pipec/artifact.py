"""Exporting a model as one artifact file: `pipec.export` and `pipec export`.

    export_artifact(model, example_inputs, "model.pipec")   # -> ExportResult

The model is captured whole by torch.export (the "export" capture: no graph breaks,
no fallback to eager; what torch.export cannot capture is an error naming the source
line), fused and compiled like any graph, then packed with its weights by the
runtime package (`pipec_runtime_cudagraph.bundle`, which defines the file format
and loads it again without capture, fusion, codegen or Dynamo).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import sys
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipec_ir import CompileOptions

from .errors import PipecError
from .pipeline import Session, compile_graph, cross_boundary, dump_document, env_kernel_dir, warn_fallbacks
from .plugins import get_registry

# the distributions whose versions every artifact records (the stages' own are added)
DISTRIBUTIONS = ("pipec", "pipec-ir", "pipec-capture", "pipec-fusion", "pipec-codegen-triton",
                 "pipec-runtime-cudagraph", "torch", "triton", "safetensors")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


class ExportError(PipecError):
    """The model could not be exported (captured whole, compiled or packed)."""


@dataclass
class ExportResult:
    path: Path
    name: str
    sha256: str  # of the whole file (`sha256sum`)
    nbytes: int
    inputs: list[dict]  # {name, shape, dtype} of the user inputs (shapes may hold symbols)
    symbols: list[dict]  # {name, min, max, hint}: the guards
    outputs: list[dict]
    weights: int  # number of parameter/buffer tensors
    weight_bytes: int
    kernels: list[str]
    members: list[str]
    session: Session = field(repr=False, default_factory=Session)
    max_error: float | None = None  # with check=True: the loaded artifact vs eager
    mismatch: str | None = None

    def to_dict(self) -> dict:
        return {"path": str(self.path), "name": self.name, "sha256": self.sha256, "bytes": self.nbytes,
                "inputs": self.inputs, "symbols": self.symbols, "outputs": self.outputs,
                "weights": self.weights, "weight_bytes": self.weight_bytes, "kernels": self.kernels,
                "members": self.members, "max_error": self.max_error, "mismatch": self.mismatch,
                "ok": self.mismatch is None}


# ---------------------------------------------------------------- capture failures


def _library_dirs() -> tuple[str, ...]:
    """Directories of code that is not the user's: torch, pipec's packages, the standard library."""
    import importlib.util
    import os
    import sysconfig

    dirs = []
    for module in ("torch", "pipec", "pipec_capture", "pipec_ir", "typer", "click", "pluggy", "_pytest"):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            dirs.append(os.path.dirname(os.path.abspath(spec.origin)) + os.sep)
    dirs.append(os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep)
    return tuple(dirs)


def _user_frame(exc: BaseException) -> tuple[str, int, str] | None:
    """(file, line, code) of the innermost user frame torch names in `exc` or its causes."""
    import linecache
    import os
    import traceback

    library = _library_dirs()
    stack, named, traced = [], [], []  # Dynamo's user stack, frames named in messages, tracebacks
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for frame in getattr(exc, "real_stack", None) or []:
            stack.append((frame.filename, frame.lineno, (frame.line or "").strip()))
        named.extend((path, int(line), "") for path, line in _FRAME.findall(str(exc)))
        traced.extend((f.filename, f.lineno, (f.line or "").strip())
                      for f in traceback.extract_tb(exc.__traceback__))
        exc = exc.__cause__ or exc.__context__

    def is_user(frame) -> bool:
        path = frame[0]
        return not path.startswith("<") and not os.path.abspath(path).startswith(library)

    user = ([f for f in stack if is_user(f)] or [f for f in named if is_user(f)]
            or [f for f in traced if is_user(f)])
    if not user:
        return None
    path, line, code = user[-1]
    return path, line, code or linecache.getline(path, line).strip()


def _root_message(exc: BaseException) -> str:
    """The first line of the innermost exception torch raised (not pipec's wrappers)."""
    seen, chain = set(), []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    for e in reversed(chain):
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        if lines:
            return f"{type(e).__name__}: {lines[0]}"
    return type(chain[-1]).__name__ if chain else "unknown error"


def describe_export_failure(name: str, exc: BaseException) -> str:
    """One line: where in the model torch.export stopped and why."""
    frame = _user_frame(exc)
    where = ""
    if frame is not None:
        path, line, code = frame
        where = f" at {path}:{line}" + (f" (`{code}`)" if code else "")
    return (f"export of {name} failed{where}: {_root_message(exc).rstrip('.')} (torch.export must capture "
            "the whole model as one graph: rewrite that code, or use pipec.compile, which allows graph breaks)")


# ---------------------------------------------------------------- outputs


def output_structure(value, count: int):
    """How the model returns its outputs (see pipec_runtime_cudagraph.bundle.unflatten), from an
    eager result: tensors and None are leaves; tuples, lists and str-keyed dicts nest. None if the
    result does not map one to one onto the graph's `count` outputs."""
    import torch

    index = 0

    def encode(v):
        nonlocal index
        if isinstance(v, torch.Tensor) or v is None:
            index += 1
            return index - 1
        if isinstance(v, tuple) and not hasattr(v, "_fields"):
            return {"tuple": [encode(x) for x in v]}
        if isinstance(v, list):
            return {"list": [encode(x) for x in v]}
        if isinstance(v, dict) and all(isinstance(k, str) for k in v):
            return {"dict": [[k, encode(x)] for k, x in v.items()]}
        raise TypeError(type(v).__name__)

    try:
        structure = encode(value)
    except TypeError:
        return None
    return structure if index == count else None


# ---------------------------------------------------------------- export


def _versions(options: CompileOptions) -> tuple[dict, dict]:
    """(made_with versions, stages {stage: {name, distribution, version}})."""
    from pipec_runtime_cudagraph.bundle import versions

    made_with = versions(DISTRIBUTIONS)
    registry = get_registry()
    stages = {}
    for stage in ("capture", "fusion", "codegen"):
        name = getattr(options, stage)
        entry = registry.entry(stage, name)
        stages[stage] = {"name": name, "distribution": entry.distribution, "version": entry.version}
        made_with.setdefault(entry.distribution, entry.version)
    return made_with, stages


def _model_name(model) -> str:
    name = getattr(model, "__name__", None) or type(model).__name__
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name).lower() or "model"


def export_options(*, name: str, strict: bool = True, dynamic_shapes=None, **compile_kwargs) -> CompileOptions:
    """CompileOptions for an export: capture "export", whole graph; ValueError for bad keywords."""
    from .api import make_options

    if compile_kwargs.get("capture", "export") != "export":
        raise ValueError(f"capture {compile_kwargs['capture']!r} cannot export: an artifact is captured by "
                         "torch.export (capture 'export')")
    compile_kwargs["capture"] = "export"
    compile_kwargs["fullgraph"] = True
    compile_kwargs.pop("dynamic", None)  # the symbols come from dynamic_shapes (see export_artifact)
    options = make_options(**compile_kwargs)
    from pipec_runtime_cudagraph.bundle import RUNTIMES

    if options.runtime not in RUNTIMES:
        raise ValueError(f"runtime {options.runtime!r} cannot run an artifact (use one of: {', '.join(RUNTIMES)})")
    extra = {"export_strict": bool(strict), "model_name": name, "graph_name": name}
    if dynamic_shapes is not None:
        extra["export_dynamic_shapes"] = dynamic_shapes
    return options.with_extra(**extra)


def dynamic_all(example_inputs) -> tuple:
    """torch.export dynamic_shapes making every dimension of every input dynamic where the model
    allows it (torch.export.Dim.AUTO: sizes the model fixes stay static)."""
    import torch

    return tuple({d: torch.export.Dim.AUTO for d in range(t.dim())} if isinstance(t, torch.Tensor) else None
                 for t in example_inputs)


def export_artifact(model, example_inputs, path, *, name: str | None = None, strict: bool = True,
                    dynamic_shapes=None, check: bool = False, session: Session | None = None,
                    expected: Any = None, **compile_kwargs) -> ExportResult:
    """Export `model` to the artifact file `path`; see `pipec.export`. Raises ExportError (capture,
    compile and packing failures, one line), ValueError for bad keywords."""
    import torch

    from pipec_runtime_cudagraph.bundle import pack_artifact, write_artifact

    name = name or _model_name(model)
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if compile_kwargs.pop("dynamic", None) and dynamic_shapes is None:
        dynamic_shapes = dynamic_all(inputs)
    if (dynamic_shapes is not None and not isinstance(model, torch.nn.Module)
            and isinstance(dynamic_shapes, (tuple, list)) and len(dynamic_shapes) == len(inputs)):
        # a function is exported as a module whose forward takes *args: one spec for that tuple
        dynamic_shapes = (tuple(dynamic_shapes),)
    options = export_options(name=name, strict=strict, dynamic_shapes=dynamic_shapes, **compile_kwargs)
    runtime = options.runtime
    session = session if session is not None else Session()
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor):
            raise ExportError(f"export of {name}: example input {i} is a {type(t).__name__}; an artifact "
                              "takes tensors only", stage="capture", impl="export", graph=name)

    module = type(model).__module__ if isinstance(model, torch.nn.Module) else None
    if strict and module is not None and module not in sys.modules:
        raise ExportError(f"export of {name}: its class {type(model).__name__} comes from module {module!r}, "
                          "which is not in sys.modules; strict torch.export imports it by name: register it "
                          "(sys.modules[name] = module) or pass strict=False", stage="capture", impl="export",
                          graph=name)
    with torch.no_grad():
        if expected is None:
            try:
                expected = model(*inputs)
            except Exception as exc:
                raise ExportError(f"export of {name}: running it eagerly on the example inputs failed: "
                                  f"{_root_message(exc)}", stage="capture", impl="export", graph=name) from exc
        capture = get_registry().get("capture", "export")
        if not hasattr(capture, "export_with_bindings"):
            raise ExportError("capture 'export' has no export_with_bindings", stage="capture", impl="export")
        if session.on_stage:
            session.on_stage("capture", "export", name, "start")
        start = time.perf_counter()
        try:
            graph, bindings = capture.export_with_bindings(model, list(inputs), options)
            graph = cross_boundary(graph, "graph")
        except Exception as exc:
            raise ExportError(describe_export_failure(name, exc), stage="capture", impl="export",
                              graph=name) from exc
        capture_seconds = time.perf_counter() - start
        if session.on_stage:
            session.on_stage("capture", "export", graph.name, "end")
    warn_fallbacks(graph, graph.name)
    if options.dump_dir:
        dump_document(options.dump_dir, graph.name, "capture", graph)

    plan = compile_graph(graph, (), options, session=session, name=graph.name, stop_after="fusion")
    stats = session.graphs[-1]
    stats.stage_seconds["capture"] = capture_seconds
    # codegen continues the same graph: record it into the same stats, under the same name
    rest = Session(on_stage=session.on_stage)
    program = compile_graph(plan, (), options, session=rest, name=stats.name, stop_after="codegen")
    for g in rest.graphs:
        stats.stage_seconds.update(g.stage_seconds)
        if isinstance(getattr(g, "cache", None), dict) and isinstance(getattr(stats, "cache", None), dict):
            stats.cache.update(g.cache)
    stats.add_program(program)

    weights = {i.name: bindings.get(i.name) for i in graph.inputs if i.role != "input"}
    missing = sorted(k for k, v in weights.items() if v is None)
    if missing:
        raise ExportError(f"export of {name}: no value for graph input(s) {', '.join(missing)}",
                          stage="capture", impl="export", graph=name)
    structure = output_structure(expected, len(program.outputs))
    if structure is None:
        warnings.warn(f"pipec: export of {name}: the model's outputs do not map onto the graph's "
                      f"{len(program.outputs)} outputs; the artifact returns them as a flat tuple", stacklevel=2)
    made_with, stages = _versions(options)
    try:
        data = pack_artifact(graph=graph, plan=plan, program=program, weights=weights, name=name,
                             runtime=runtime, output_structure=structure, made_with=made_with, stages=stages)
    except ValueError as exc:
        raise ExportError(f"export of {name}: {exc}", stage="export", graph=name) from exc
    path = write_artifact(path, data)

    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        members = zf.namelist()
        manifest = json.loads(zf.read("manifest.json"))
    result = ExportResult(
        path=path, name=name, sha256=hashlib.sha256(data).hexdigest(), nbytes=len(data),
        inputs=manifest["inputs"], symbols=manifest["symbols"], outputs=manifest["outputs"],
        weights=len(weights), weight_bytes=sum(t.numel() * t.element_size() for t in weights.values()),
        kernels=manifest["kernels"], members=members, session=session)
    if check:
        result.max_error, result.mismatch = check_artifact(path, inputs, expected)
    return result


def check_artifact(path, inputs, expected) -> tuple[float | None, str | None]:
    """Load the artifact as a user would and compare its outputs with eager's."""
    import torch

    from pipec_runtime_cudagraph import load_artifact

    from .api import compare_outputs

    loaded = load_artifact(path, kernel_dir=env_kernel_dir())
    with torch.no_grad():
        actual = loaded(*inputs)
    return compare_outputs(actual, expected)


def export(model, example_inputs, path, *, strict: bool = True, dynamic_shapes=None, check: bool = False,
           name: str | None = None, **compile_kwargs) -> ExportResult:
    """Compile `model` whole through torch.export into ONE artifact file at `path`.

    The file holds the IR documents, the kernel sources, the weights (safetensors) and
    a manifest (versions, input specs and symbol ranges, sha256 of every part);
    `pipec.load(path)` runs it with the runtime package alone. `dynamic_shapes` is
    torch.export's argument (e.g. `({0: torch.export.Dim("batch", min=1, max=64)},)`);
    without it every size is static. Other keywords are `pipec.compile`'s (fusion,
    mode/runtime, codegen, ...). `check=True` loads the artifact and compares it with
    eager PyTorch (raising PipecError on a mismatch). A model torch.export cannot
    capture whole raises PipecError naming the source line.
    """
    result = export_artifact(model, example_inputs, path, strict=strict, dynamic_shapes=dynamic_shapes,
                             check=check, name=name, **compile_kwargs)
    if result.mismatch:
        raise PipecError(f"export of {result.name}: the artifact's outputs differ from eager: {result.mismatch}")
    return result


def load(path, runtime: str | None = None, *, sha256: str | None = None, **kwargs):
    """Load an artifact written by `pipec.export`: a callable taking the user inputs.

    Only the runtime package runs it (no capture, fusion, codegen, no Dynamo tracing).
    Raises pipec_runtime_cudagraph.ArtifactError for a damaged or modified file.
    """
    from pipec_runtime_cudagraph import load_artifact

    from .logs import configure_logs

    configure_logs()  # PIPEC_LOGS=tuning: what the runtime tunes for it
    kwargs.setdefault("kernel_dir", env_kernel_dir())  # the runtime package reads no environment
    return load_artifact(path, runtime, sha256=sha256, **kwargs)


__all__ = ["ExportError", "ExportResult", "describe_export_failure", "export", "export_artifact", "load",
           "output_structure"]
