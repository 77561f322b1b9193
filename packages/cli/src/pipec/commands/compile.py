"""`pipec compile` and `pipec explain`, and the compile-run-compare step they share with `pipec report`."""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

from ..errors import find_pipec_error
from ..exits import fail, one_line
from ..model_file import load_model_file, to_device
from ..render import StageProgress, print_code, print_report, stderr, stdout
from .arguments import (
    CacheOpt,
    CaptureOpt,
    CodegenOpt,
    CodeOpt,
    DeviceOpt,
    DumpOpt,
    DynamicOpt,
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
    check_dump_dir,
    check_dynamo_capture,
    options_or_exit,
    resolve_device,
    use_interpreter,
)


def compile_model(model_file: Path, *, fusion: str, runtime: str | None, mode: Mode, dynamic: bool,
                   fullgraph: bool, dump_ir: Path | None, model_name: str, inputs_name: str, device: str,
                   capture: str, codegen: str, cache: str | None):
    """What compile, explain and report share: load the model file, compile it with pipec, run it
    and compare with eager. -> (ExplainReport, Session, options, model name, device, interpreted,
    CommandClock, mismatch or None); a failure exits with one line."""
    from ..profile import CommandClock

    clock = CommandClock()  # where the command's time goes (JSON `command_seconds`, explain's table)
    import torch

    from ..api import report_from_session, run_and_compare
    from ..pipeline import Session

    clock.lap("import torch")
    options = options_or_exit(mode=mode.value, fusion=fusion, runtime=runtime, dynamic=True if dynamic else None,
                       fullgraph=fullgraph, capture=capture, codegen=codegen,
                       dump_dir=str(dump_ir) if dump_ir else None, cache=cache,
                       eager_fallback=False)  # a graph that fails to compile is the command's error
    device = resolve_device(device)
    check_dynamo_capture(options)
    check_dump_dir(dump_ir)
    check_cache_usable(options)
    clock.lap("plugins and options")
    model, inputs, name = load_model_file(model_file, model_name, inputs_name)
    interpreted = use_interpreter(device)
    model, inputs = to_device(model, inputs, device)

    try:
        with torch.no_grad():
            expected = model(*inputs)
    except Exception as exc:
        fail(f"running {name} eagerly on its example inputs failed: {one_line(exc)}")
    clock.lap("model file and eager run")

    progress = StageProgress(enabled=True)
    session = Session(on_stage=progress)
    try:
        with progress:
            _, max_error, mismatch, session = run_and_compare(model, inputs, options, session, name=name,
                                                              expected=expected)
    except Exception as exc:
        if os.environ.get("PIPEC_TRACEBACK"):
            traceback.print_exc()
        found = find_pipec_error(exc)
        from ..cache import CacheError

        fail(str(found) if found else f"compiling {name} failed: {one_line(exc)}",
             2 if isinstance(found, CacheError) else 1)  # an unusable cache is a usage error

    report = report_from_session(session, max_error=max_error, mismatch=mismatch)  # breaks: as the backend saw them
    clock.lap("check against eager")
    clock.split("check against eager", "first call", report.compile_profile.get("wall_s", 0.0))
    return report, session, options, name, device, interpreted, clock, mismatch


def _run(model_file: Path, *, explain: bool, fusion: str, runtime: str | None, mode: Mode, dynamic: bool,
         fullgraph: bool, dump_ir: Path | None, output_code: bool, json_out: bool, model_name: str,
         inputs_name: str, device: str, capture: str, codegen: str, cache: str | None = None) -> None:
    report, _, options, name, device, interpreted, clock, mismatch = compile_model(
        model_file, fusion=fusion, runtime=runtime, mode=mode, dynamic=dynamic, fullgraph=fullgraph,
        dump_ir=dump_ir, model_name=model_name, inputs_name=inputs_name, device=device, capture=capture,
        codegen=codegen, cache=cache)
    interpreted = interpreted and report.kernel_count > 0  # Triton kernels ran in the interpreter
    if json_out:
        data = report.to_dict(with_code=output_code)
        stages = {"capture": options.capture, "fusion": options.fusion, "codegen": options.codegen,
                  "runtime": options.runtime}
        data.update(model=name, device=device, interpreter=interpreted, ok=mismatch is None, **stages,
                    command_seconds=clock.to_dict(),
                    options={**stages, "dynamic": options.dynamic, "fullgraph": options.fullgraph,
                             "cache": report.cache or "none"})
        print(json.dumps(data, indent=2))
    else:
        print_report(report, name, options, device, interpreted, explain=explain)
        if explain:
            from ..profile import command_line

            stdout.print(command_line(clock.to_dict()), markup=False)
        if output_code:
            print_code(report.kernels)
    if interpreted and not json_out:
        stderr.print("note: no CUDA device: Triton kernels ran in Triton's interpreter (TRITON_INTERPRET=1)")
    if dump_ir:
        stderr.print(f"IR written to {dump_ir}/")
    if mismatch:
        fail(f"{name}: {mismatch}", 1)


def compile_cmd(model_file: ModelFile, fusion: FusionOpt = "default", runtime: RuntimeOpt = None,
                mode: ModeOpt = Mode.default, dynamic: DynamicOpt = False, fullgraph: FullgraphOpt = False,
                dump_ir: DumpOpt = None, output_code: CodeOpt = False, json_out: JsonOpt = False,
                model: ModelNameOpt = "model", inputs: InputsNameOpt = "example_inputs",
                device: DeviceOpt = "auto", capture: CaptureOpt = "dynamo", codegen: CodegenOpt = "triton",
                cache: CacheOpt = None, no_cache: NoCacheOpt = False) -> None:
    """Compile MODEL.py with pipec, run it and check it against eager PyTorch."""
    _run(model_file, explain=False, fusion=fusion, runtime=runtime, mode=mode, dynamic=dynamic,
         fullgraph=fullgraph, dump_ir=dump_ir, output_code=output_code, json_out=json_out, model_name=model,
         inputs_name=inputs, device=device, capture=capture, codegen=codegen,
         cache=cache_name(cache, no_cache))


def explain_cmd(model_file: ModelFile, fusion: FusionOpt = "default", runtime: RuntimeOpt = None,
                mode: ModeOpt = Mode.default, dynamic: DynamicOpt = False, fullgraph: FullgraphOpt = False,
                dump_ir: DumpOpt = None, output_code: CodeOpt = False, json_out: JsonOpt = False,
                model: ModelNameOpt = "model", inputs: InputsNameOpt = "example_inputs",
                device: DeviceOpt = "auto", capture: CaptureOpt = "dynamo", codegen: CodegenOpt = "triton",
                cache: CacheOpt = None, no_cache: NoCacheOpt = False) -> None:
    """Compile MODEL.py and explain it: graph breaks, kernels, fusions, extern ops, rejected fusions."""
    _run(model_file, explain=True, fusion=fusion, runtime=runtime, mode=mode, dynamic=dynamic,
         fullgraph=fullgraph, dump_ir=dump_ir, output_code=output_code, json_out=json_out, model_name=model,
         inputs_name=inputs, device=device, capture=capture, codegen=codegen,
         cache=cache_name(cache, no_cache))
