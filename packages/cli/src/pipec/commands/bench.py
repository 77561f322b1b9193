"""`pipec bench`: time eager, TorchInductor and pipec on a model file (the work is in pipec.bench)."""

from __future__ import annotations

import json
import math
import os
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..errors import find_pipec_error
from ..exits import fail, one_line
from ..model_file import load_model_module, ready_to_check
from ..render import stderr, stdout
from .arguments import (
    BenchDtype,
    DeviceOpt,
    FusionOpt,
    InputsNameOpt,
    JsonOpt,
    Mode,
    ModelFile,
    ModelNameOpt,
    ModeOpt,
    RuntimeOpt,
    check_dynamo_capture,
    check_finite,
    check_output_file,
    options_or_exit,
    parse_compile_options,
    resolve_device,
)


def _bench_tolerance(module, name: str, atol: float | None, rtol: float | None) -> tuple[float | None, float | None]:
    """--atol/--rtol, else the model file's `tolerance = dict(atol=..., rtol=...)`, else (None, None)."""
    if (atol is None) != (rtol is None):
        fail("give --atol and --rtol together")
    if atol is not None:
        return atol, rtol
    tolerance = getattr(module, "tolerance", None)
    if tolerance is None:
        return None, None
    if not (isinstance(tolerance, dict) and set(tolerance) == {"atol", "rtol"}
            and all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in tolerance.values())):
        fail(f"`tolerance` in {name} must be dict(atol=FLOAT, rtol=FLOAT), finite numbers >= 0")
    return float(tolerance["atol"]), float(tolerance["rtol"])


def bench_cmd(model_file: ModelFile, fusion: FusionOpt = "default", runtime: RuntimeOpt = None,
              mode: ModeOpt = Mode.default, model: ModelNameOpt = "model", inputs: InputsNameOpt = "example_inputs",
              device: DeviceOpt = "auto",
              inductor: Annotated[bool | None, typer.Option(
                  "--inductor/--no-inductor", show_default=False,
                  help="Measure TorchInductor (default: only with CUDA).")] = None,
              inductor_mode: Annotated[list[str] | None, typer.Option(
                  "--inductor-mode", help="Also measure this torch.compile mode (repeatable), "
                  "e.g. max-autotune-no-cudagraphs.")] = None,
              pipec_mode: Annotated[list[Mode] | None, typer.Option(
                  "--pipec-mode", help="Also measure pipec in this mode (repeatable), e.g. "
                  "reduce-overhead.")] = None,
              warm: Annotated[bool, typer.Option(
                  "--warm/--no-warm", help="Compile every backend again from its caches after the timing "
                  "(the warm compile time).")] = True,
              keep_going: Annotated[bool, typer.Option(
                  "--keep-going", help="A backend that fails (compile error, outputs unlike eager's) gets its "
                  "error in its row and the others are still timed; the exit code is still 1.")] = False,
              warmup: Annotated[float, typer.Option("--warmup", help="Warm-up per measurement, ms.")] = 25.0,
              rep: Annotated[float, typer.Option("--rep", help="Measuring time per measurement, ms.")] = 100.0,
              rounds: Annotated[int, typer.Option(
                  "--rounds", help="Timing rounds over all backends (rotated order); a backend's time "
                  "is its rounds' median.")] = 3,
              option: Annotated[list[str] | None, typer.Option(
                  "--option", help="A compile option for every pipec row, KEY=VALUE (repeatable; "
                  "e.g. grouped_matmuls=true).")] = None,
              extra_rounds: Annotated[int, typer.Option(
                  "--extra-rounds", help="Up to this many more rounds, one at a time, while a backend's "
                  "rounds disagree by more than 10% (a disturbed round).")] = 1,
              dtype: Annotated[BenchDtype | None, typer.Option(
                  "--dtype", help="Cast the model and its floating inputs first.")] = None,
              channels_last: Annotated[bool, typer.Option(
                  "--channels-last", help="Store the model's 4-d weights and the 4-d inputs channels-last "
                  "first, for every backend (conv nets: no weight copies per call).")] = False,
              atol: Annotated[float | None, typer.Option("--atol", help="Numerics check tolerance (with --rtol; "
                                                         "default: the file's `tolerance`, else the dtype's).")] = None,
              rtol: Annotated[float | None, typer.Option("--rtol", help="See --atol.")] = None,
              keep_caches: Annotated[bool, typer.Option(
                  "--keep-caches", help="Use the usual compile caches (cold compiles may then be hits) instead "
                  "of private empty ones.")] = False,
              output: Annotated[Path | None, typer.Option(
                  "-o", "--output", help="Also write the JSON here (updated after each backend).")] = None,
              json_out: JsonOpt = False) -> None:
    """Time eager, TorchInductor and pipec on MODEL.py, after checking their outputs against eager."""

    from ..bench import (INDUCTOR_MODES, BenchMismatch, BenchOptions, measures_inductor, reference_off_eager,
                         run_bench, write_json)
    from ..bench_measure import PhaseClock
    from ..bench_process import process_caches
    from ..bench_table import bench_table, profile_table

    modes = ["default"] + [m for m in (inductor_mode or []) if m != "default"]
    unknown = [m for m in modes if m not in INDUCTOR_MODES]
    if unknown:
        fail(f"unknown --inductor-mode {unknown[0]!r} (expected one of: {', '.join(INDUCTOR_MODES)})")
    check_finite(warmup, "--warmup")
    check_finite(rep, "--rep", positive=True)
    check_finite(atol, "--atol")
    check_finite(rtol, "--rtol")
    if rounds < 1:
        fail("--rounds must be at least 1")
    if extra_rounds < 0:
        fail("--extra-rounds must be at least 0")
    chosen = parse_compile_options(option)
    options = options_or_exit(mode=mode.value, fusion=fusion, runtime=runtime, **chosen)
    extra = [m.value for m in dict.fromkeys(pipec_mode or []) if m != mode]
    pipec_modes = tuple((m, options_or_exit(mode=m, fusion=fusion, **chosen)) for m in extra)  # --runtime: the main row's
    device = resolve_device(device)
    check_dynamo_capture(options)
    check_output_file(output, "--output")
    step, status_line = ["setting up"], []

    def progress(message: str) -> None:
        step[0] = message.split(":")[0]
        for status in status_line:
            status.update(f"pipec bench · {name} · {message}")

    def save(result) -> None:
        if output is not None:
            try:
                write_json(result, str(output))
            except OSError as exc:
                fail(f"cannot write {str(output)!r}: {exc.strerror or exc}")

    # the run's phase clock starts here, so its phase_seconds cover loading the model too
    name = model_file.name  # until the file names its model
    clock = PhaseClock(progress)
    measure_inductor = measures_inductor(inductor, device)
    if measure_inductor:
        clock("starting Inductor's compile workers (in the background)")
    # private caches from here (unless --keep-caches), and Inductor's workers importing torch while the model builds
    with process_caches(keep_caches, measure_inductor):
        clock("loading the model file (building the model, moving it to the device)")
        model_obj, example, name, module = load_model_module(model_file, model, inputs)
        atol, rtol = _bench_tolerance(module, model_file.name, atol, rtol)
        model_obj, example = ready_to_check(model_obj, example, name, device, dtype.value if dtype is not None else None,
                                            channels_last)
        if channels_last:
            name = f"{name} (channels-last)"
        bench_options = BenchOptions(pipec=options, inductor=inductor, inductor_modes=tuple(modes), warmup_ms=warmup,
                                     rep_ms=rep, rounds=rounds, extra_rounds=extra_rounds, atol=atol, rtol=rtol, keep_caches=keep_caches,
                                     pipec_modes=pipec_modes, keep_going=keep_going, warm=warm)

        try:
            with stderr.status("pipec bench") as status:
                status_line.append(status)
                result = run_bench(model_obj, example, name, bench_options, progress=clock, on_update=save)
        except BenchMismatch as exc:
            fail(f"{name}: {exc}", 1)
        except typer.Exit:
            raise
        except Exception as exc:
            if os.environ.get("PIPEC_TRACEBACK"):
                traceback.print_exc()
            found = find_pipec_error(exc)
            fail(f"{name}: {step[0]} failed: {found if found else one_line(exc)}", 1)
    result.complete = True
    save(result)
    if json_out:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        wide = stdout if stdout.is_terminal else Console(highlight=False, width=160)  # piped: not squeezed to 80
        wide.print(bench_table(result), markup=False)
        profile = profile_table(result)
        if profile is not None:
            wide.print(profile, markup=False)
    if result.interpreter:
        stderr.print("note: no CUDA device: CPU wall times, pipec's kernels in Triton's interpreter "
                     "(a smoke test, not a performance number)")
    for b in result.backends:  # Inductor's numerics are not pipec's failure (run_bench notes them)
        if reference_off_eager(b):
            stderr.print(f"warning: {name}: {b.numerics} (timed all the same: compare its speed knowing that)",
                         markup=False)
    failed = [b for b in result.backends if b.error]
    if failed:
        fail(f"{name}: {len(failed)} backend(s) failed; {failed[0].name}: {failed[0].error}", 1)
