"""`pipec report`: one offline HTML page about a compile (docs/debugging.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..exits import fail
from ..render import stderr
from .arguments import (
    CacheOpt,
    CaptureOpt,
    CodegenOpt,
    DeviceOpt,
    DynamicOpt,
    FullgraphOpt,
    FusionOpt,
    InputsNameOpt,
    Mode,
    ModelFile,
    ModelNameOpt,
    ModeOpt,
    NoCacheOpt,
    RuntimeOpt,
    cache_name,
)
from .compile import compile_model


def report_cmd(model_file: ModelFile,
               output: Annotated[Path, typer.Option("-o", "--output", help="The HTML page to write.")] = Path("report.html"),
               fusion: FusionOpt = "default", runtime: RuntimeOpt = None,
               mode: ModeOpt = Mode.default, dynamic: DynamicOpt = False, fullgraph: FullgraphOpt = False,
               model: ModelNameOpt = "model", inputs: InputsNameOpt = "example_inputs",
               device: DeviceOpt = "auto", capture: CaptureOpt = "dynamo", codegen: CodegenOpt = "triton",
               cache: CacheOpt = None, no_cache: NoCacheOpt = False) -> None:
    """Compile MODEL.py and write one offline HTML page about it: graphs and breaks, the fusion graph,
    each kernel's source, launch and tuning, the compile-time profile, the error against eager."""
    from ..bench import record_tuning, versions
    from ..report import collect, render

    if output.is_dir() or not output.parent.is_dir():
        fail(f"cannot write the report to {str(output)!r}: "
             + ("it is a directory" if output.is_dir() else "its directory does not exist"))
    with record_tuning() as tuning:  # the runtime's `pipec.tuning` log: what autotuning picked
        report, session, options, name, device, interpreted, _, mismatch = compile_model(
            model_file, fusion=fusion, runtime=runtime, mode=mode, dynamic=dynamic, fullgraph=fullgraph,
            dump_ir=None, model_name=model, inputs_name=inputs, device=device, capture=capture, codegen=codegen,
            cache=cache_name(cache, no_cache))
    data = collect(report, session, model=name, device=device, interpreted=interpreted and report.kernel_count > 0,
                   options=options, tuning=tuning, versions=versions())
    from pipec_runtime_cudagraph.files import atomic_write

    try:
        atomic_write(str(output), render(data).encode(), mode=0o644)
    except OSError as exc:
        fail(f"cannot write {str(output)!r}: {exc.strerror or exc}")
    stderr.print(f"report written to {output}")
    if mismatch:
        fail(f"{name}: {mismatch}", 1)
