"""The `pipec` command (typer).

    pipec compile MODEL.py [--fusion NAME] [--runtime NAME] [--mode default|reduce-overhead|max-autotune|...]
                           [--dynamic] [--fullgraph] [--dump-ir DIR] [--output-code] [--json]
    pipec explain MODEL.py [same options]
    pipec bisect MODEL.py [same options] [--dtype D] [--repro-dir DIR] [--no-narrow] [--json]
    pipec minify MODEL.py [same options] [--dtype D] -o repro.py [--json]
    pipec report MODEL.py -o report.html [same options]   (one offline HTML page; docs/debugging.md)
    pipec bench MODEL.py [--fusion NAME] [--mode ...] [--no-inductor] [--inductor-mode MODE] [--pipec-mode MODE]
                         [--keep-going] [--json] [-o FILE]
    pipec capture MODEL.py -o graph.json [--exporter export|dynamo]
    pipec fuse graph.json -o plan.json [--fusion NAME]
    pipec codegen plan.json -o program.json [--codegen NAME]
    pipec export MODEL.py -o model.pipec [--dynamic] [--check] [--fusion NAME] [--json]
    pipec run model.pipec (--inputs FILE.safetensors | --random) [--json]
    pipec plugins
    pipec cache info|clear [--cache local|redis]

Exit codes: 0 success; 1 compile failure or numerical mismatch vs eager;
2 usage error (bad flag, missing file, unknown plugin name, bad IR file), always
with one line on stderr saying why. Environment: PIPEC_DISABLE_PLUGINS,
PIPEC_LOAD_PLUGINS (see pipec.plugins), PIPEC_DUMP_IR (default --dump-ir),
PIPEC_TRACEBACK=1 (print the full traceback of a compile failure), PIPEC_CACHE
(default --cache), PIPEC_CACHE_DIR and PIPEC_REDIS_URL (see pipec.cache), PIPEC_LOGS
(what each stage decides, on stderr: see pipec.logs).
"""

from __future__ import annotations

import enum
import importlib.util
import json
import math
import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

import pipec_ir

from .errors import PipecError, PipecPluginWarning, find_pipec_error

app = typer.Typer(name="pipec", help="pipec: compile PyTorch models into fused Triton kernels.",
                  add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)

stderr = Console(stderr=True, highlight=False, soft_wrap=True)
stdout = Console(highlight=False, soft_wrap=True)


# ---------------------------------------------------------------- errors and warnings


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr, then exit with `code` (2 usage, 1 compile/numerical failure)."""
    line = " ".join(str(message).split("\n")[0].split()) or "failed"
    print(f"error: {line}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


def _one_line(exc: BaseException) -> str:
    inner = getattr(exc, "inner_exception", None)
    if isinstance(inner, BaseException):  # Dynamo's BackendCompilerFailed: "backend='x' raised:", then it
        return _one_line(inner)
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0].strip()}" if lines else type(exc).__name__


def _show_warning(message, category, filename, lineno, file=None, line=None):
    text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
    print(f"warning: {text}", file=sys.stderr, flush=True)


def _setup_warnings() -> None:
    warnings.showwarning = _show_warning
    warnings.simplefilter("always", PipecPluginWarning)


@app.callback()
def _main_callback() -> None:
    _setup_warnings()


# ---------------------------------------------------------------- loading a model file


def load_model_file(path: Path, model_name: str = "model", inputs_name: str = "example_inputs"):
    """(model, example_inputs tuple, name) from a Python file; usage errors exit 2 with one line."""
    model, inputs, name, _ = load_model_module(path, model_name, inputs_name)
    return model, inputs, name


def load_model_module(path: Path, model_name: str = "model", inputs_name: str = "example_inputs"):
    """load_model_file, also returning the imported module (for optional names like `tolerance`)."""
    import torch

    path = Path(path)
    if not path.is_file():
        fail(f"model file {str(path)!r} not found")
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in path.stem) or "model"
    spec = importlib.util.spec_from_file_location(f"pipec_model_{name}", path)
    if spec is None or spec.loader is None:
        fail(f"cannot import {path.name} (not a Python file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.export (strict) and pickling look classes up by module name
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except SystemExit:
        sys.modules.pop(spec.name, None)
        fail(f"{path.name} called exit() while being imported")
    except Exception as exc:
        sys.modules.pop(spec.name, None)
        fail(f"importing {path.name} failed: {_one_line(exc)}")
    finally:
        try:
            sys.path.remove(str(path.resolve().parent))
        except ValueError:
            pass
    if not hasattr(module, model_name):
        fail(f"{path.name} defines no `{model_name}` (use --model NAME)")
    model = getattr(module, model_name)
    if not callable(model):
        fail(f"`{model_name}` in {path.name} is a {type(model).__name__}, not an nn.Module or a function")
    if not hasattr(module, inputs_name):
        fail(f"{path.name} defines no `{inputs_name}` (use --inputs NAME)")
    inputs = getattr(module, inputs_name)
    if callable(inputs) and not isinstance(inputs, torch.Tensor):
        try:
            inputs = inputs()
        except Exception as exc:
            fail(f"calling `{inputs_name}()` from {path.name} failed: {_one_line(exc)}")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if isinstance(inputs, list):
        inputs = tuple(inputs)
    if not isinstance(inputs, tuple):
        fail(f"`{inputs_name}` in {path.name} must be a tuple of tensors or a zero-argument function "
             f"returning one, not {type(inputs).__name__}")
    return model, inputs, name, module


def _resolve_device(device: str) -> str:
    """--device: auto (cuda when there is one), cpu, cuda or cuda:N; anything else is a usage
    error (exit 2). Commands call it before any work."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if re.fullmatch(r"cpu(:0)?", device):
        return "cpu"
    match = re.fullmatch(r"cuda(?::(\d+))?", device)
    if match is None:
        fail(f"--device {device!r}: expected auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        fail(f"--device {device}, but no CUDA device is available")
    count = torch.cuda.device_count()
    if match.group(1) is not None and int(match.group(1)) >= count:
        fail(f"--device {device}: this machine has {count} CUDA device{'s' if count != 1 else ''} "
             f"(cuda:0 to cuda:{count - 1})")
    return device


def _cannot_write_in(directory: Path) -> str | None:
    """Why no file can be created in `directory` (None: one can). Tried for real: permission bits
    say nothing to root, or of a read-only or special file system."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".pipec-probe-"):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def _check_dump_dir(path: Path | None) -> None:
    """--dump-ir (or PIPEC_DUMP_IR): a directory pipec can write in, made now; else exit 2."""
    if path is None:
        return
    if path.exists() and not path.is_dir():
        fail(f"--dump-ir {str(path)!r} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--dump-ir {str(path)!r}: cannot create the directory ({exc.strerror or exc})")
    why = _cannot_write_in(path)
    if why:
        fail(f"--dump-ir {str(path)!r}: cannot write in the directory ({why})")


def _check_output_file(path: Path | None, flag: str, *, make_parents: bool = False) -> None:
    """An output file option that cannot be written is a usage error found before any work
    (`make_parents`: the writer creates missing directories)."""
    if path is None:
        return
    if path.is_dir():
        fail(f"{flag} {str(path)!r} is a directory, not a file")
    directory = path.parent
    if make_parents:
        while not directory.exists() and directory != directory.parent:
            directory = directory.parent
    if not directory.is_dir():
        fail(f"{flag} {str(path)!r}: {str(directory)!r} is not a directory" if directory.exists() else
             f"{flag} {str(path)!r}: the directory {str(directory)!r} does not exist")
    why = _cannot_write_in(directory)
    if why:
        fail(f"{flag} {str(path)!r}: cannot write in {str(directory)!r} ({why})")


def _check_finite(value: float | None, flag: str, *, positive: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        fail(f"{flag} must be a finite number {'> 0' if positive else '>= 0'}, got {value}")


def _to_device(model, inputs, device: str):
    import torch
    from torch.utils._pytree import tree_map

    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    inputs = tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, inputs)
    return model, inputs


def _use_interpreter(device: str) -> bool:
    """Whether Triton kernels will run in Triton's interpreter (CPU tensors).

    The runtime switches the interpreter on itself, at the right moment: setting
    TRITON_INTERPRET here, after triton is imported, would leave triton.language's
    library functions compiled for the other mode.
    """
    return not device.startswith("cuda")


# ---------------------------------------------------------------- options


class Mode(str, enum.Enum):
    default = "default"
    reduce_overhead = "reduce-overhead"
    max_autotune = "max-autotune"
    max_autotune_no_cudagraphs = "max-autotune-no-cudagraphs"


class Exporter(str, enum.Enum):
    export = "export"
    dynamo = "dynamo"


ModelFile = Annotated[Path, typer.Argument(help="Python file defining `model` and `example_inputs`.",
                                           show_default=False)]
FusionOpt = Annotated[str, typer.Option("--fusion", help="Fusion policy (see `pipec plugins`).")]
RuntimeOpt = Annotated[str | None, typer.Option("--runtime", help="Runtime (default: launch; "
                                                   "cudagraph with --mode reduce-overhead).")]
ModeOpt = Annotated[Mode, typer.Option("--mode", help="reduce-overhead selects the CUDA Graph runtime; "
                                       "max-autotune(-no-cudagraphs) tunes exhaustively (README, Modes).")]
DynamicOpt = Annotated[bool, typer.Option("--dynamic", help="Compile with symbolic sizes.")]
FullgraphOpt = Annotated[bool, typer.Option("--fullgraph", help="Fail on any graph break.")]
DumpOpt = Annotated[Path | None, typer.Option("--dump-ir", envvar="PIPEC_DUMP_IR",
                                                 help="Write every stage's IR (JSON and text) here.")]
CodeOpt = Annotated[bool, typer.Option("--output-code", help="Print each kernel's Triton source.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the results as JSON.")]
ModelNameOpt = Annotated[str, typer.Option("--model", help="Name of the model in the file.")]
InputsNameOpt = Annotated[str, typer.Option("--inputs", help="Name of the example inputs in the file.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto (cuda if available), cuda or cpu.")]
CaptureOpt = Annotated[str, typer.Option("--capture", help="Capture implementation.")]
CodegenOpt = Annotated[str, typer.Option("--codegen", help="Code generator.")]
CacheOpt = Annotated[str | None, typer.Option(
    "--cache", envvar="PIPEC_CACHE", show_default=False,
    help="Compile cache: local (default; PIPEC_CACHE_DIR), redis (PIPEC_REDIS_URL), none, or a plugin's.")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Compile without the compile cache (--cache none).")]


def _cache_name(cache: str | None, no_cache: bool) -> str | None:
    return "none" if no_cache else cache


def _check_cache(options) -> None:
    """An unusable compile cache (unsafe directory, unreachable server) is a usage error: exit 2."""
    from .cache import CacheError, check_cache
    from .plugins import get_registry

    try:
        check_cache(options.cache, get_registry())
    except CacheError as exc:
        fail(str(exc))


def _check_dynamo_capture(options) -> None:
    """compile/explain/bench run the model under torch.compile: the capture must plug into Dynamo."""
    from .plugins import get_registry

    if getattr(get_registry().get("capture", options.capture), "dynamo_backend", None) is None:
        fail(f"--capture {options.capture}: it cannot run under torch.compile (it has no dynamo_backend); "
             f"use a Dynamo capture such as 'dynamo' (or `pipec export` for a torch.export capture)")


def _options(**kwargs):
    from .api import make_options

    try:
        return make_options(**kwargs)
    except ValueError as exc:
        fail(str(exc))


# ---------------------------------------------------------------- progress


class StageProgress:
    """Rich progress on stderr: a spinner for the running stage, one line per finished stage."""

    def __init__(self, enabled: bool = True) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=stderr, transient=True, disable=not enabled)
        self.task = self.progress.add_task("compiling", total=None)
        self.enabled = enabled
        self.started = time.perf_counter()
        self.hit = False

    def __call__(self, stage: str, impl: str, graph: str, event: str) -> None:
        if event == "start":
            self.started = time.perf_counter()
            self.hit = False
            self.progress.update(self.task, description=f"{stage} ({impl}) · {graph}")
        elif event == "hit":  # the stage's output came from the compile cache
            self.hit = True
        elif self.enabled:
            ms = (time.perf_counter() - self.started) * 1e3
            cached = "  (cache hit)" if self.hit else ""
            self.progress.console.print(f"[green]✓[/] {stage:<8} {impl:<10} {graph}  {ms:.1f} ms{cached}")

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)


# ---------------------------------------------------------------- compile / explain


def _compile_model(model_file: Path, *, fusion: str, runtime: str | None, mode: Mode, dynamic: bool,
                   fullgraph: bool, dump_ir: Path | None, model_name: str, inputs_name: str, device: str,
                   capture: str, codegen: str, cache: str | None):
    """What compile, explain and report share: load the model file, compile it with pipec, run it
    and compare with eager. -> (ExplainReport, Session, options, model name, device, interpreted,
    CommandClock, mismatch or None); a failure exits with one line."""
    from .profile import CommandClock

    clock = CommandClock()  # where the command's time goes (JSON `command_seconds`, explain's table)
    import torch

    from .api import report_from_session, run_and_compare
    from .pipeline import Session

    clock.lap("import torch")
    options = _options(mode=mode.value, fusion=fusion, runtime=runtime, dynamic=True if dynamic else None,
                       fullgraph=fullgraph, capture=capture, codegen=codegen,
                       dump_dir=str(dump_ir) if dump_ir else None, cache=cache)
    device = _resolve_device(device)
    _check_dynamo_capture(options)
    _check_dump_dir(dump_ir)
    _check_cache(options)
    clock.lap("plugins and options")
    model, inputs, name = load_model_file(model_file, model_name, inputs_name)
    interpreted = _use_interpreter(device)
    model, inputs = _to_device(model, inputs, device)

    try:
        with torch.no_grad():
            expected = model(*inputs)
    except Exception as exc:
        fail(f"running {name} eagerly on its example inputs failed: {_one_line(exc)}")
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
        from .cache import CacheError

        fail(str(found) if found else f"compiling {name} failed: {_one_line(exc)}",
             2 if isinstance(found, CacheError) else 1)  # an unusable cache is a usage error

    report = report_from_session(session, max_error=max_error, mismatch=mismatch)  # breaks: as the backend saw them
    clock.lap("check against eager")
    clock.split("check against eager", "first call", report.compile_profile.get("wall_s", 0.0))
    return report, session, options, name, device, interpreted, clock, mismatch


def _run(model_file: Path, *, explain: bool, fusion: str, runtime: str | None, mode: Mode, dynamic: bool,
         fullgraph: bool, dump_ir: Path | None, output_code: bool, json_out: bool, model_name: str,
         inputs_name: str, device: str, capture: str, codegen: str, cache: str | None = None) -> None:
    report, _, options, name, device, interpreted, clock, mismatch = _compile_model(
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
        _print_report(report, name, options, device, interpreted, explain=explain)
        if explain:
            from .profile import command_line

            stdout.print(command_line(clock.to_dict()), markup=False)
        if output_code:
            _print_code(report.kernels)
    if interpreted and not json_out:
        stderr.print("note: no CUDA device: Triton kernels ran in Triton's interpreter (TRITON_INTERPRET=1)")
    if dump_ir:
        stderr.print(f"IR written to {dump_ir}/")
    if mismatch:
        fail(f"{name}: {mismatch}", 1)


def _fmt_error(err: float | None) -> str:
    return "n/a" if err is None else f"{err:.3g}"


def _print_report(report, name: str, options, device: str, interpreted: bool, *, explain: bool) -> None:
    table = Table(title=f"pipec · {name}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("stages", f"capture {options.capture} → fusion {options.fusion} → codegen {options.codegen}"
                            f" → runtime {options.runtime}")
    table.add_row("device", device + (" (Triton interpreter)" if interpreted else ""))
    breaks = f" ({report.graph_break_count} graph breaks)" if report.graph_break_count else ""
    table.add_row("graphs", f"{report.graph_count}{breaks}")
    table.add_row("ops", str(report.op_count))
    table.add_row("kernels", str(report.kernel_count))
    table.add_row("fusions", str(report.fusion_count))
    table.add_row("extern ops", str(len(report.extern_ops)) +
                  (f" ({', '.join(report.extern_ops)})" if report.extern_ops else ""))
    table.add_row("not fused", str(len(report.not_fused)))
    table.add_row("max error vs eager", _fmt_error(report.max_error) + ("  MISMATCH" if report.mismatch else ""))
    table.add_row("cache", _fmt_cache(report))
    for stage, seconds in report.stage_seconds.items():
        table.add_row(f"time {stage}", f"{seconds * 1e3:.1f} ms")
    stdout.print(table)
    for note in report.notes:
        stdout.print(f"note: {note}", markup=False)
    if not explain:
        return
    _print_profile(report.compile_profile)
    if report.break_reasons:
        stdout.print("[bold]graph breaks[/]")
        for r in report.break_reasons:
            stdout.print(f"  - {r}", markup=False)
    if report.extern_ops:
        ext = Table(title="extern ops (run through torch)", title_justify="left")
        ext.add_column("extern op", overflow="fold")
        ext.add_column("reason", overflow="fold")
        for target, reason in report.extern_ops.items():
            ext.add_row(target, reason)
        stdout.print(ext)
    if report.not_fused:
        nf = Table(title="not fused", title_justify="left")
        for col in ("first", "second", "reason"):
            nf.add_column(col, overflow="fold")
        for a, b, r in report.not_fused:
            nf.add_row(a, b, r)
        stdout.print(nf)
    for g in report.graphs:
        stdout.print(f"graph {g['name']}: {g['op_count']} ops, {g['kernel_count']} kernels, "
                     f"{g['fusion_count']} fusions", markup=False)
        if g.get("kernels"):
            stdout.print(_kernel_table(g["kernels"]))


def _print_profile(data: dict) -> None:
    from .profile import profile_table

    table = profile_table(data)
    if table is not None:
        stdout.print(table)


def _kernel_table(rows: list[dict]):
    """The graph's kernels: what each computes (kind, iteration shape, ops) and how it runs."""
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    # kind and shape never wrap; the long columns share what is left of the terminal's width
    table.add_column("kernel", overflow="fold", ratio=3)
    table.add_column("kind", no_wrap=True)
    table.add_column("shape", no_wrap=True)
    table.add_column("ops", overflow="fold", ratio=3)
    table.add_column("runs as", overflow="fold", ratio=3)
    for r in rows:
        ops = r["ops"] if len(r["ops"]) <= 6 else [*r["ops"][:5], f"… ({len(r['ops'])} in all)"]
        table.add_row(r["name"], r["kind"], "×".join(r["shape"]), ", ".join(ops), r["runs_as"])
    return table


def _fmt_cache(report) -> str:
    """`local: hits capture 1, fusion 1, codegen 1; misses none` (or `off`)."""
    if report.cache is None:
        return "off"

    def counts(d: dict) -> str:
        return ", ".join(f"{s} {n}" for s, n in d.items() if n) or "none"

    return f"{report.cache}: hits {counts(report.cache_hits)}; misses {counts(report.cache_misses)}"


def _print_code(kernels) -> None:
    if not kernels:
        print("# (no Triton kernels were generated)")
    for kname, source in kernels:
        print(f"# ---- {kname}")
        print(source.rstrip())
        print()


@app.command("compile")
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
         cache=_cache_name(cache, no_cache))


@app.command("explain")
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
         cache=_cache_name(cache, no_cache))


@app.command("report")
def report_cmd(model_file: ModelFile,
               output: Annotated[Path, typer.Option("-o", "--output", help="The HTML page to write.")] = Path("report.html"),
               fusion: FusionOpt = "default", runtime: RuntimeOpt = None,
               mode: ModeOpt = Mode.default, dynamic: DynamicOpt = False, fullgraph: FullgraphOpt = False,
               model: ModelNameOpt = "model", inputs: InputsNameOpt = "example_inputs",
               device: DeviceOpt = "auto", capture: CaptureOpt = "dynamo", codegen: CodegenOpt = "triton",
               cache: CacheOpt = None, no_cache: NoCacheOpt = False) -> None:
    """Compile MODEL.py and write one offline HTML page about it: graphs and breaks, the fusion graph,
    each kernel's source, launch and tuning, the compile-time profile, the error against eager."""
    from .bench import _versions, record_tuning
    from .report import collect, render

    if output.is_dir() or not output.parent.is_dir():
        fail(f"cannot write the report to {str(output)!r}: "
             + ("it is a directory" if output.is_dir() else "its directory does not exist"))
    with record_tuning() as tuning:  # the runtime's `pipec.tuning` log: what autotuning picked
        report, session, options, name, device, interpreted, _, mismatch = _compile_model(
            model_file, fusion=fusion, runtime=runtime, mode=mode, dynamic=dynamic, fullgraph=fullgraph,
            dump_ir=None, model_name=model, inputs_name=inputs, device=device, capture=capture, codegen=codegen,
            cache=_cache_name(cache, no_cache))
    data = collect(report, session, model=name, device=device, interpreted=interpreted and report.kernel_count > 0,
                   options=options, tuning=tuning, versions=_versions())
    from pipec_runtime_cudagraph.files import atomic_write

    try:
        atomic_write(str(output), render(data).encode(), mode=0o644)
    except OSError as exc:
        fail(f"cannot write {str(output)!r}: {exc.strerror or exc}")
    stderr.print(f"report written to {output}")
    if mismatch:
        fail(f"{name}: {mismatch}", 1)


# ---------------------------------------------------------------- bench


class BenchDtype(str, enum.Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


def _to_dtype(model, inputs, dtype: str):
    """The model's floating parameters and the floating inputs cast to `dtype`."""
    import torch
    from torch.utils._pytree import tree_map

    target = getattr(torch, dtype)
    if isinstance(model, torch.nn.Module):
        model = model.to(target)
    inputs = tree_map(lambda t: t.to(target) if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
                      inputs)
    return model, inputs


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


@app.command("bench")
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
              dtype: Annotated[BenchDtype | None, typer.Option(
                  "--dtype", help="Cast the model and its floating inputs first.")] = None,
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
    import torch

    from .bench import INDUCTOR_MODES, BenchMismatch, BenchOptions, bench_table, profile_table, run_bench, write_json

    modes = ["default"] + [m for m in (inductor_mode or []) if m != "default"]
    unknown = [m for m in modes if m not in INDUCTOR_MODES]
    if unknown:
        fail(f"unknown --inductor-mode {unknown[0]!r} (expected one of: {', '.join(INDUCTOR_MODES)})")
    _check_finite(warmup, "--warmup")
    _check_finite(rep, "--rep", positive=True)
    _check_finite(atol, "--atol")
    _check_finite(rtol, "--rtol")
    if rounds < 1:
        fail("--rounds must be at least 1")
    options = _options(mode=mode.value, fusion=fusion, runtime=runtime)
    extra = [m.value for m in dict.fromkeys(pipec_mode or []) if m != mode]
    pipec_modes = tuple((m, _options(mode=m, fusion=fusion)) for m in extra)  # --runtime: the main row's
    device = _resolve_device(device)
    _check_dynamo_capture(options)
    _check_output_file(output, "--output")
    model_obj, example, name, module = load_model_module(model_file, model, inputs)
    atol, rtol = _bench_tolerance(module, model_file.name, atol, rtol)
    model_obj, example = _to_device(model_obj, example, device)
    if dtype is not None:
        model_obj, example = _to_dtype(model_obj, example, dtype.value)
    if isinstance(model_obj, torch.nn.Module):
        model_obj = model_obj.eval()
    try:
        with torch.no_grad():
            model_obj(*example)
    except Exception as exc:
        fail(f"running {name} eagerly on its example inputs failed: {_one_line(exc)}")
    bench_options = BenchOptions(pipec=options, inductor=inductor, inductor_modes=tuple(modes), warmup_ms=warmup,
                                 rep_ms=rep, rounds=rounds, atol=atol, rtol=rtol, keep_caches=keep_caches,
                                 pipec_modes=pipec_modes, keep_going=keep_going, warm=warm)
    step = ["setting up"]

    def save(result) -> None:
        if output is not None:
            try:
                write_json(result, str(output))
            except OSError as exc:
                fail(f"cannot write {str(output)!r}: {exc.strerror or exc}")

    try:
        with stderr.status("pipec bench") as status:
            def progress(message: str) -> None:
                step[0] = message.split(":")[0]
                status.update(f"pipec bench · {name} · {message}")

            result = run_bench(model_obj, example, name, bench_options, progress=progress, on_update=save)
    except BenchMismatch as exc:
        fail(f"{name}: {exc}", 1)
    except typer.Exit:
        raise
    except Exception as exc:
        if os.environ.get("PIPEC_TRACEBACK"):
            traceback.print_exc()
        found = find_pipec_error(exc)
        fail(f"{name}: {step[0]} failed: {found if found else _one_line(exc)}", 1)
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
    failed = [b for b in result.backends if b.error]
    if failed:
        fail(f"{name}: {len(failed)} backend(s) failed; {failed[0].name}: {failed[0].error}", 1)


# ---------------------------------------------------------------- bisect and minify (bisect.py, minify.py)


def _load_to_check(model_file: Path, model: str, inputs: str, device: str, dtype):
    """(model, inputs, name) on `device`, cast to `dtype`, after one eager run (else exit 2)."""
    import torch

    model_obj, example, name = load_model_file(model_file, model, inputs)
    model_obj, example = _to_device(model_obj, example, device)
    if dtype is not None:
        model_obj, example = _to_dtype(model_obj, example, dtype.value)
    if isinstance(model_obj, torch.nn.Module):
        model_obj = model_obj.eval()
    try:
        with torch.no_grad():
            model_obj(*example)
    except Exception as exc:
        fail(f"running {name} eagerly on its example inputs failed: {_one_line(exc)}")
    return model_obj, example, name


def _compile_failure(name: str, exc: Exception) -> NoReturn:
    if os.environ.get("PIPEC_TRACEBACK"):
        traceback.print_exc()
    found = find_pipec_error(exc)
    fail(f"{found if found else f'compiling {name} failed: {_one_line(exc)}'} "
         f"(`pipec minify` shrinks it to a small repro)", 1)


@app.command("bisect")
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
    from .bisect import bisect_model, format_report

    options = _options(mode=mode.value, fusion=fusion, runtime=runtime, fullgraph=fullgraph, capture=capture,
                       codegen=codegen, cache=_cache_name(cache, no_cache))
    device = _resolve_device(device)
    _check_dynamo_capture(options)
    _check_cache(options)
    _check_output_file(repro_dir / "probe.pt", "--repro-dir", make_parents=True)
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


@app.command("minify")
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
    from .minify import NothingFails, minify_model, write_repro

    options = _options(mode=mode.value, fusion=fusion, runtime=runtime, fullgraph=fullgraph, capture=capture,
                       codegen=codegen)
    device = _resolve_device(device)
    _check_dynamo_capture(options)
    _check_output_file(output, "--output", make_parents=True)
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


# ---------------------------------------------------------------- stage by stage


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
    from .cache import CacheError
    from .pipeline import compile_graph

    try:
        return compile_graph(source, example_inputs, options, name=name, stop_after=stop_after)
    except PipecError as exc:
        if os.environ.get("PIPEC_TRACEBACK"):
            traceback.print_exc()
        fail(str(exc), 2 if isinstance(exc, CacheError) else 1)  # an unusable cache is a usage error


OutputOpt = Annotated[Path, typer.Option("-o", "--output", help="Where to write the IR document (JSON).")]
TextOpt = Annotated[bool, typer.Option("--text", help="Also print the document's text form.")]


@app.command("capture")
def capture_cmd(model_file: ModelFile, output: OutputOpt, exporter: Annotated[Exporter, typer.Option(
                    "--exporter", help="export (torch.export: one whole graph) or dynamo.")] = Exporter.export,
                dynamic: DynamicOpt = False, model: ModelNameOpt = "model",
                inputs: InputsNameOpt = "example_inputs", text: TextOpt = False) -> None:
    """Capture MODEL.py into a Graph IR file (parameters become named inputs)."""
    options = _options(capture=exporter.value, dynamic=True if dynamic else None, fullgraph=True)
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

    from .backend import aten_backend
    from .pipeline import compile_graph
    from .plugins import get_registry

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
        fail(str(found) if found else f"capturing {name} failed: {_one_line(exc)}", 1)
    finally:
        torch._dynamo.reset()
    if len(graphs) != 1:
        fail(f"{name}: dynamo captured {len(graphs)} graphs, expected one (try --exporter export)", 1)
    return graphs[0]


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


@app.command("fuse")
def fuse_cmd(graph_file: Annotated[Path, typer.Argument(help="Graph IR file (from `pipec capture`).",
                                                        show_default=False)],
             output: OutputOpt, fusion: FusionOpt = "default", text: TextOpt = False) -> None:
    """Partition a Graph into kernels: Graph JSON -> KernelPlan JSON."""
    graph = _read_ir(graph_file, "graph")  # a bad file is reported before any plugin loads
    options = _options(fusion=fusion)
    plan = _run_stage(graph, (), options, "fusion")
    _write_ir(output, plan)
    stderr.print(f"wrote {output}: {len(plan.kernels)} kernels, {len(plan.fusions)} fusions, "
                 f"{len(plan.rejected)} rejected (policy {plan.policy!r})")
    if text:
        print(pipec_ir.format_document(plan))


@app.command("codegen")
def codegen_cmd(plan_file: Annotated[Path, typer.Argument(help="KernelPlan IR file (from `pipec fuse`).",
                                                          show_default=False)],
                output: OutputOpt, codegen: CodegenOpt = "triton", text: TextOpt = False) -> None:
    """Generate code for a KernelPlan: KernelPlan JSON -> Program JSON."""
    plan = _read_ir(plan_file, "kernel_plan")
    options = _options(codegen=codegen)
    program = _run_stage(plan, (), options, "codegen")
    _write_ir(output, program)
    stderr.print(f"wrote {output}: {len(program.kernels)} Triton kernels, {len(program.steps)} steps")
    if text:
        print(pipec_ir.format_document(program))


# ---------------------------------------------------------------- exported artifacts


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


@app.command("export")
def export_cmd(model_file: ModelFile,
               output: Annotated[Path, typer.Option("-o", "--output", help="The artifact file to write.")],
               fusion: FusionOpt = "default", runtime: RuntimeOpt = None, mode: ModeOpt = Mode.default,
               dynamic: Annotated[bool, typer.Option("--dynamic", help="Make every input dimension symbolic "
                                                     "where the model allows it (torch.export Dim.AUTO).")] = False,
               strict: Annotated[bool, typer.Option("--strict/--no-strict", help="torch.export's strict mode "
                                                    "(Dynamo) or non-strict (Python tracing).")] = True,
               check: Annotated[bool, typer.Option("--check", help="Load the artifact, run it on the example "
                                                   "inputs and compare with eager (exit 1 on a mismatch).")] = False,
               dump_ir: DumpOpt = None, json_out: JsonOpt = False, model: ModelNameOpt = "model",
               inputs: InputsNameOpt = "example_inputs", device: DeviceOpt = "auto",
               codegen: CodegenOpt = "triton") -> None:
    """Export MODEL.py whole (torch.export) into ONE artifact file: IR, kernels, weights, manifest."""
    import torch

    from .artifact import ExportError, check_artifact, export_artifact, export_options
    from .pipeline import Session

    try:
        export_options(name=model_file.stem, fusion=fusion, runtime=runtime, mode=mode.value, codegen=codegen,
                       dump_dir=str(dump_ir) if dump_ir else None)
    except ValueError as exc:
        fail(str(exc))
    device = _resolve_device(device)  # used by --check; a bad value is refused either way
    _check_dump_dir(dump_ir)
    _check_output_file(output, "--output", make_parents=True)
    module, example, name = load_model_file(model_file, model, inputs)
    if not all(isinstance(t, torch.Tensor) for t in example):
        fail(f"`{inputs}` in {model_file.name} must hold tensors only to be exported")
    try:
        with torch.no_grad():
            expected = module(*example)
    except Exception as exc:
        fail(f"running {name} eagerly on its example inputs failed: {_one_line(exc)}")
    progress = StageProgress(enabled=not json_out)
    session = Session(on_stage=progress)
    try:
        with progress:
            result = export_artifact(module, example, output, name=name, strict=strict, dynamic=dynamic,
                                     session=session, expected=expected, fusion=fusion, runtime=runtime,
                                     mode=mode.value, codegen=codegen, dump_dir=str(dump_ir) if dump_ir else None)
    except (ExportError, PipecError) as exc:
        if os.environ.get("PIPEC_TRACEBACK"):
            traceback.print_exc()
        fail(str(exc), 1)
    except OSError as exc:
        fail(f"cannot write {str(output)!r}: {exc.strerror or exc}")
    except Exception as exc:
        if os.environ.get("PIPEC_TRACEBACK"):
            traceback.print_exc()
        found = find_pipec_error(exc)
        fail(str(found) if found else f"exporting {name} failed: {_one_line(exc)}", 1)
    if not check:
        device = None  # nothing ran
    if check:
        try:
            _, moved = _to_device(None, example, device)
            result.max_error, result.mismatch = check_artifact(output, moved, expected)
        except Exception as exc:
            if os.environ.get("PIPEC_TRACEBACK"):
                traceback.print_exc()
            fail(f"running the exported {name} failed: {_one_line(exc)}", 1)
    if json_out:
        print(json.dumps({**result.to_dict(), "device": device}, indent=2))
    else:
        table = Table(title=f"pipec export · {name}", show_header=False, title_justify="left")
        table.add_column("what", style="bold")
        table.add_column("value", overflow="fold")
        table.add_row("artifact", f"{result.path} ({result.nbytes} bytes)")
        table.add_row("sha256", result.sha256)
        table.add_row("inputs", ", ".join(f"{i['name']}: {i['dtype']}{_fmt_shape(i['shape'])}" for i in result.inputs))
        if result.symbols:
            table.add_row("symbols", ", ".join(
                f"{s['name']} in [{s['min']}, {s['max'] if s['max'] is not None else 'inf'}]" for s in result.symbols))
        table.add_row("outputs", ", ".join(f"{o['dtype']}{_fmt_shape(o['shape'])}" if o["dtype"] else "None"
                                           for o in result.outputs))
        table.add_row("weights", f"{result.weights} tensors, {result.weight_bytes} bytes")
        table.add_row("kernels", f"{len(result.kernels)}" + (f" ({', '.join(result.kernels)})" if result.kernels else ""))
        if check:
            table.add_row("max error vs eager", _fmt_error(result.max_error) + ("  MISMATCH" if result.mismatch else ""))
        stdout.print(table, markup=False)
    if result.mismatch:
        fail(f"{name}: the artifact's outputs differ from eager: {result.mismatch}", 1)


def _read_input_file(path: Path, loaded) -> list:
    """User inputs from a safetensors file: keyed by input name, or by position ("0", "1", ...)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        fail(f"inputs file {str(path)!r} not found")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        fail(f"{path}: not a readable safetensors file ({_one_line(exc)})")
    names = [s.name for s in loaded.inputs]
    if set(tensors) == set(names):
        return [tensors[n] for n in names]
    positions = [str(i) for i in range(len(names))]
    if set(tensors) == set(positions):
        return [tensors[p] for p in positions]
    missing = [n for n in names if n not in tensors]
    extra = sorted(set(tensors) - set(names))
    what = f"has no tensor {missing[0]!r}" if missing else f"has a tensor {extra[0]!r} that is not an input"
    fail(f"{path} {what}; {loaded.name} takes {', '.join(names) or 'no inputs'} (key the tensors by these "
         f"names, or by position 0, 1, ...)")


def _tensor_summary(index: int, name, t) -> dict:
    import hashlib

    import torch

    if not isinstance(t, torch.Tensor):
        return {"index": index, "name": name, "shape": None, "dtype": None, "sum": None, "sha256": None}
    cpu = t.detach().to("cpu").contiguous()
    raw = cpu.reshape(-1).view(torch.uint8).numpy().tobytes() if cpu.numel() else b""
    total = float(cpu.to(torch.float64).sum()) if cpu.numel() else 0.0
    return {"index": index, "name": name, "shape": list(cpu.shape), "dtype": str(cpu.dtype).removeprefix("torch."),
            "sum": total, "sha256": hashlib.sha256(raw).hexdigest()}


class ArtifactRuntime(str, enum.Enum):
    launch = "launch"
    cudagraph = "cudagraph"


@app.command("run")
def run_cmd(artifact: Annotated[Path, typer.Argument(help="Artifact file (from `pipec export`).",
                                                     show_default=False)],
            inputs_file: Annotated[Path | None, typer.Option(
                "--inputs", help="safetensors file of the inputs, keyed by input name (or 0, 1, ...).")] = None,
            random: Annotated[bool, typer.Option("--random", help="Random inputs from the recorded specs "
                                                 "(symbols at their example sizes).")] = False,
            seed: Annotated[int, typer.Option("--seed", help="Seed for --random.", min=-2**63,
                                              max=2**64 - 1)] = 0,
            device: DeviceOpt = "auto",
            runtime: Annotated[ArtifactRuntime | None, typer.Option(
                "--runtime", help="Override the runtime recorded in the artifact.")] = None,
            sha256: Annotated[str | None, typer.Option("--sha256", help="Refuse the file unless its sha256 "
                                                       "is this.")] = None,
            save_outputs: Annotated[Path | None, typer.Option(
                "--save-outputs", help="Write the outputs to this safetensors file (keys 0, 1, ...).")] = None,
            json_out: JsonOpt = False) -> None:
    """Run an exported artifact with the runtime package alone; print output shapes, dtypes and checksums."""
    # only the runtime package: no capture, fusion or codegen stage, no Dynamo
    from pipec_runtime_cudagraph import ArtifactError, ArtifactInputError, load_artifact

    from .pipeline import env_kernel_dir

    if (inputs_file is None) == (not random):
        fail("give either --inputs FILE.safetensors or --random")
    device = _resolve_device(device)
    _check_output_file(save_outputs, "--save-outputs")
    try:
        loaded = load_artifact(artifact, runtime.value if runtime else None, sha256=sha256, kernel_dir=env_kernel_dir())
    except ArtifactError as exc:
        fail(str(exc))
    except Exception as exc:
        if os.environ.get("PIPEC_TRACEBACK"):
            traceback.print_exc()
        fail(f"loading {artifact} failed: {_one_line(exc)}", 1)
    if random:
        inputs = list(loaded.random_inputs(seed, device=device))
    else:
        inputs = [t.to(device) for t in _read_input_file(inputs_file, loaded)]
    import torch

    try:
        loaded.check_inputs(inputs)
    except ArtifactInputError as exc:
        fail(str(exc))
    start = time.perf_counter()
    try:
        with torch.no_grad():
            outputs = loaded.run(inputs)
    except Exception as exc:
        if os.environ.get("PIPEC_TRACEBACK"):
            traceback.print_exc()
        fail(f"running {loaded.name} failed: {_one_line(exc)}", 1)
    seconds = time.perf_counter() - start
    names = [o["name"] for o in loaded.manifest["outputs"]]
    summary = [_tensor_summary(i, n, t) for i, (n, t) in enumerate(zip(names, outputs))]
    if save_outputs is not None:
        from safetensors.torch import save_file

        try:
            save_file({str(i): t.detach().to("cpu").contiguous() for i, t in enumerate(outputs)
                       if isinstance(t, torch.Tensor)}, str(save_outputs))
        except Exception as exc:  # noqa: BLE001 - safetensors' SafetensorError is none of OSError, ValueError
            fail(f"cannot write {str(save_outputs)!r}: {_one_line(exc)}")
    interpreted = device == "cpu" and bool(loaded.manifest["kernels"])
    if json_out:
        print(json.dumps({
            "artifact": str(artifact), "name": loaded.name, "sha256": loaded.sha256, "runtime": loaded.runtime,
            "device": device, "interpreter": interpreted, "seconds": seconds,
            "inputs": [{"name": s.name, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
                       for s, t in zip(loaded.inputs, inputs)],
            "outputs": summary, "made_with": loaded.manifest.get("made_with", {}),
        }, indent=2))
        return
    table = Table("output", "name", "shape", "dtype", "sum", "sha256", title=f"pipec run · {loaded.name} "
                  f"({device}{', Triton interpreter' if interpreted else ''})", title_justify="left")
    for s in summary:
        if s["dtype"] is None:
            table.add_row(str(s["index"]), str(s["name"]), "-", "None", "-", "-")
        else:
            table.add_row(str(s["index"]), str(s["name"]), _fmt_shape(s["shape"]), s["dtype"], f"{s['sum']:.6g}",
                          s["sha256"][:16])
    stdout.print(table, markup=False)


# ---------------------------------------------------------------- the compile cache

cache_app = typer.Typer(name="cache", help="The compile cache: where it is and what it holds; clear it.",
                        no_args_is_help=True)
app.add_typer(cache_app)

CacheNameOpt = Annotated[str, typer.Option(
    "--cache", envvar="PIPEC_CACHE", help="Which cache: local (PIPEC_CACHE_DIR) or redis (PIPEC_REDIS_URL).")]


def _cache_backend(name: str):
    """The registry entry of cache `name`; a usage error (exit 2) if there is none."""
    from .plugins import get_registry

    if name == "none":
        fail("--cache none: there is no cache to show or clear")
    try:
        return get_registry().entry("cache", name)
    except pipec_ir.UnknownStageError as exc:
        fail(str(exc))


def _cache_call(entry, method: str):
    fn = getattr(entry.impl, method, None)
    if fn is None:
        fail(f"cache {entry.name!r} ({entry.distribution} {entry.version}) does not support `pipec cache {method}`")
    try:
        return fn()
    except pipec_ir.CacheError as exc:  # a backend's "cannot be used" (pipec's CacheError is one)
        fail(str(exc))
    except OSError as exc:
        fail(f"cache {entry.name}: {exc.strerror or exc}")


def _fmt_bytes(n: int) -> str:
    size, unit = float(n), "bytes"
    for bigger in ("KiB", "MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit} ({n} bytes)"


@cache_app.command("info")
def cache_info_cmd(cache: CacheNameOpt = "local", json_out: JsonOpt = False) -> None:
    """Show the compile cache: backend, location, number of entries and their size."""
    entry = _cache_backend(cache)
    info = dict(_cache_call(entry, "info"))
    info.update(backend=entry.name, distribution=entry.distribution, version=entry.version)
    if json_out:
        print(json.dumps(info, indent=2))
        return
    table = Table(title="pipec compile cache", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("backend", f"{entry.name} ({entry.distribution} {entry.version})")
    table.add_row("location", str(info.get("location", "?")))
    table.add_row("entries", str(info.get("entries", "?")))
    table.add_row("size", _fmt_bytes(int(info.get("bytes", 0))))
    stdout.print(table, markup=False)


@cache_app.command("clear")
def cache_clear_cmd(cache: CacheNameOpt = "local", json_out: JsonOpt = False) -> None:
    """Delete every entry of the compile cache (nothing else in its directory or Redis database)."""
    entry = _cache_backend(cache)
    removed = _cache_call(entry, "clear")
    location = getattr(entry.impl, "location", entry.name)
    if json_out:
        print(json.dumps({"backend": entry.name, "location": str(location), "removed": removed}, indent=2))
    else:
        stdout.print(f"cleared {removed} entries from the {entry.name} cache ({location})", markup=False)


# ---------------------------------------------------------------- plugins


@app.command("plugins")
def plugins_cmd(json_out: JsonOpt = False) -> None:
    """List every registered stage implementation with its distribution and version, then every plugin:
    what it registers, wraps or observes, and those skipped (failed to load, register or configure)."""
    from .plugins import get_registry, plugin_infos

    entries = get_registry().entries()
    infos = plugin_infos()
    skipped = [p for p in infos if p.status != "loaded"]
    if json_out:
        print(json.dumps({
            "stages": [{"stage": e.stage, "name": e.name, "distribution": e.distribution, "version": e.version}
                       for e in entries],
            "skipped": [{"plugin": p.name, "distribution": p.distribution, "status": p.status, "error": p.error}
                        for p in skipped],
            "plugins": [{"plugin": p.name, "distribution": p.distribution, "version": p.version, "status": p.status,
                         "error": p.error, "role": p.role, "hooks": list(p.hooks), "stages": list(p.stages),
                         "wraps": list(p.wraps)} for p in infos],
        }, indent=2))
        return
    table = Table("stage", "name", "distribution", "version", title="pipec stages", title_justify="left")
    for e in entries:
        wrapped = f" (wrapped by {', '.join(e.wrapped_by)})" if e.wrapped_by else ""
        table.add_row(e.stage, e.name + wrapped, e.distribution, e.version)
    stdout.print(table)
    table = Table("plugin", "distribution", "version", "status", "does", title="pipec plugins", title_justify="left")
    for p in infos:
        does = "; ".join(filter(None, [", ".join(p.stages), ", ".join(f"wraps {w}" for w in p.wraps)]))
        does = does or ("observer" if p.role == "observer" else "-")
        table.add_row(p.name, p.distribution, p.version, p.status, does)
    stdout.print(table)
    for p in skipped:
        why = f": {p.error}" if p.error else ""
        stdout.print(f"skipped plugin {p.name!r} ({p.distribution} {p.version}): {p.status}{why}", markup=False)


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> None:
    """The `pipec` console script: usage errors become one line on stderr and exit 2."""
    _setup_warnings()
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="pipec", standalone_mode=False)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        # click's ClickException / UsageError (typer vendors click in recent versions: match by shape)
        code = getattr(exc, "exit_code", None)
        if not (isinstance(code, int) and hasattr(exc, "format_message")):
            # a failure no command turned into its own line: still one line, the traceback on request
            if os.environ.get("PIPEC_TRACEBACK"):
                traceback.print_exc()
            print(f"error: {_one_line(exc)} (unexpected; PIPEC_TRACEBACK=1 prints the traceback)", file=sys.stderr)
            sys.exit(1)
        message = exc.format_message()
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `pipec`: the help text
            print(message, file=sys.stderr)
        else:
            ctx = getattr(exc, "ctx", None)
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            print(f"error: {' '.join(message.split())}{hint}", file=sys.stderr)
        sys.exit(code)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
