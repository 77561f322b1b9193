"""`pipec bisect` and `pipec minify`: find the first wrong kernel, shrink a failing graph
(the work is in pipec.bisect and pipec.minify)."""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path
from typing import Annotated, NoReturn

import typer

import pipec_ir

from ..errors import find_pipec_error
from ..exits import fail, one_line
from ..model_file import load_model_file, ready_to_check
from ..render import stderr, stdout
from .arguments import (
    BenchDtype,
    CacheOpt,
    CaptureOpt,
    CodegenOpt,
    DeviceOpt,
    FullgraphOpt,
    FusionOpt,
    InputsNameOpt,
    JsonOpt,
    Mode,
    ModelFile,
    ModelNameOpt,
    ModeOpt,
    NoCacheOpt,
    RuntimeOpt,
    cache_name,
    check_cache_usable,
    check_dynamo_capture,
    check_output_file,
    options_or_exit,
    resolve_device,
)


def _load_to_check(model_file: Path, model: str, inputs: str, device: str, dtype):
    """(model, inputs, name) on `device`, cast to `dtype`, after one eager run (else exit 2)."""
    model_obj, example, name = load_model_file(model_file, model, inputs)
    model_obj, example = ready_to_check(model_obj, example, name, device, dtype.value if dtype is not None else None)
    return model_obj, example, name


def _compile_failure(name: str, exc: Exception) -> NoReturn:
    if os.environ.get("PIPEC_TRACEBACK"):
        traceback.print_exc()
    found = find_pipec_error(exc)
    fail(f"{found if found else f'compiling {name} failed: {one_line(exc)}'} "
         f"(`pipec minify` shrinks it to a small repro)", 1)


def bisect_cmd(model_file: ModelFile, fusion: FusionOpt = "default", runtime: RuntimeOpt = None,
               mode: ModeOpt = Mode.default, fullgraph: FullgraphOpt = False, json_out: JsonOpt = False,
               model: ModelNameOpt = "model", inputs: InputsNameOpt = "example_inputs", device: DeviceOpt = "auto",
               capture: CaptureOpt = "dynamo", codegen: CodegenOpt = "triton", cache: CacheOpt = None,
               no_cache: NoCacheOpt = False,
               dtype: Annotated[BenchDtype | None, typer.Option(
                   "--dtype", help="Cast the model and its floating inputs first.")] = None,
               repro_dir: Annotated[Path, typer.Option(
                   "--repro-dir", help="Where the wrong kernel's inputs are saved (a .pt file).")] = Path("pipec-bisect"),
               narrow: Annotated[bool, typer.Option(
                   "--narrow/--no-narrow", help="Recompile with fewer fusions (fusion_fuel) to find the "
                   "merge that breaks numerics.")] = True,
               source: Annotated[bool, typer.Option("--source/--no-source", help="Print the kernels' "
                                                    "Triton source.")] = True) -> None:
    """Run MODEL.py's compiled kernels one by one beside eager and a float64 reference; name the
    first wrong kernel and the fusion that made it wrong (exit 1), or exit 0."""
    from ..bisect import bisect_model, format_report

    options = options_or_exit(mode=mode.value, fusion=fusion, runtime=runtime, fullgraph=fullgraph, capture=capture,
                       codegen=codegen, cache=cache_name(cache, no_cache))
    device = resolve_device(device)
    check_dynamo_capture(options)
    check_cache_usable(options)
    check_output_file(repro_dir / "probe.pt", "--repro-dir", make_parents=True)
    model_obj, example, name = _load_to_check(model_file, model, inputs, device, dtype)
    try:
        with stderr.status(f"pipec bisect · {name}") as status:
            report = bisect_model(model_obj, example, options, name=name, repro_dir=repro_dir, narrow=narrow,
                                  progress=lambda m: status.update(f"pipec bisect · {name} · {m}"))
    except typer.Exit:
        raise
    except Exception as exc:
        _compile_failure(name, exc)
    if json_out:
        print(json.dumps({**report.to_dict(), "device": device}, indent=2))
    else:
        print(format_report(report, sources=source))
    if report.diverged:
        fail(report.summary, 1)


def minify_cmd(model_file: ModelFile,
               output: Annotated[Path, typer.Option("-o", "--output", help="The repro model file to write "
                                                    "(its inputs go beside it, in a .pt file).")],
               fusion: FusionOpt = "default", runtime: RuntimeOpt = None, mode: ModeOpt = Mode.default,
               fullgraph: FullgraphOpt = False, json_out: JsonOpt = False, model: ModelNameOpt = "model",
               inputs: InputsNameOpt = "example_inputs", device: DeviceOpt = "auto", capture: CaptureOpt = "dynamo",
               codegen: CodegenOpt = "triton",
               dtype: Annotated[BenchDtype | None, typer.Option(
                   "--dtype", help="Cast the model and its floating inputs first.")] = None) -> None:
    """Shrink the first graph of MODEL.py that fails (a compile error, or outputs out of tolerance)
    to a small standalone repro: a model file, its inputs (.pt) and its pipec Graph (.graph.json)."""
    from ..minify import NothingFails, minify_model, write_repro

    options = options_or_exit(mode=mode.value, fusion=fusion, runtime=runtime, fullgraph=fullgraph, capture=capture,
                       codegen=codegen)
    device = resolve_device(device)
    check_dynamo_capture(options)
    check_output_file(output, "--output", make_parents=True)
    model_obj, example, name = _load_to_check(model_file, model, inputs, device, dtype)
    try:
        with stderr.status(f"pipec minify · {name}") as status:
            result = minify_model(model_obj, example, options, name=name,
                                  progress=lambda m: status.update(f"pipec minify · {name} · {m}"))
    except NothingFails as exc:
        fail(str(exc), 1)
    except typer.Exit:
        raise
    except Exception as exc:
        _compile_failure(name, exc)
    flags = "".join(f" --{k} {v}" for k, v in (("fusion", fusion), ("codegen", codegen), ("capture", capture))
                    if v != {"fusion": "default", "codegen": "triton", "capture": "dynamo"}[k])
    flags += f" --dtype {dtype.value}" if dtype is not None else ""
    try:
        files = write_repro(result, output, command=f"pipec bisect{flags}")
    except ValueError as exc:  # an op the repro's torch code cannot spell: the Graph file still helps
        fail(f"{name}: shrunk to {len(result.graph.nodes)} nodes, but {exc}", 1)
    except OSError as exc:
        fail(f"cannot write {str(output)!r}: {exc.strerror or exc}")
    if json_out:
        print(json.dumps({**result.to_dict(), "files": [str(f) for f in files]}, indent=2))
    else:
        stdout.print(f"{name}: graph {result.graph.name} shrunk from {result.original_nodes} to "
                     f"{len(result.graph.nodes)} nodes ({result.tests} graphs tried); it still fails: "
                     f"{result.failure.message}", markup=False)
        stdout.print(pipec_ir.format_document(result.graph), markup=False)
        stdout.print(f"wrote {', '.join(str(f) for f in files)}; reproduce: pipec bisect{flags} {files[0]}",
                     markup=False)
