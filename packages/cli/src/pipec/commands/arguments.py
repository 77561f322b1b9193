"""The options and arguments the commands share, and the checks every command makes before any
work (a bad value is a usage error: one line, exit 2)."""

from __future__ import annotations

import enum
import math
import re
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from ..exits import fail


class Mode(str, enum.Enum):
    default = "default"
    reduce_overhead = "reduce-overhead"
    max_autotune = "max-autotune"
    max_autotune_no_cudagraphs = "max-autotune-no-cudagraphs"


class Exporter(str, enum.Enum):
    export = "export"
    dynamo = "dynamo"


class BenchDtype(str, enum.Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


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


def cache_name(cache: str | None, no_cache: bool) -> str | None:
    return "none" if no_cache else cache


def check_cache_usable(options) -> None:
    """An unusable compile cache (unsafe directory, unreachable server) is a usage error: exit 2."""
    from ..cache import CacheError, check_cache
    from ..plugins import get_registry

    try:
        check_cache(options.cache, get_registry())
    except CacheError as exc:
        fail(str(exc))


def check_dynamo_capture(options) -> None:
    """compile/explain/bench run the model under torch.compile: the capture must plug into Dynamo."""
    from ..plugins import get_registry

    if getattr(get_registry().get("capture", options.capture), "dynamo_backend", None) is None:
        fail(f"--capture {options.capture}: it cannot run under torch.compile (it has no dynamo_backend); "
             f"use a Dynamo capture such as 'dynamo' (or `pipec export` for a torch.export capture)")


def options_or_exit(**kwargs):
    from ..api import make_options

    try:
        return make_options(**kwargs)
    except ValueError as exc:
        fail(str(exc))


def parse_compile_options(pairs: list[str] | None, flag: str = "--option") -> dict:
    """`KEY=VALUE` strings -> compile options (`pipec.options.parse_option`); a malformed pair is
    a usage error."""
    from ..options import parse_option

    try:
        return dict(parse_option(text) for text in pairs or [])
    except ValueError as exc:
        fail(f"{flag} {exc}")


def resolve_device(device: str) -> str:
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


def check_dump_dir(path: Path | None) -> None:
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


def check_output_file(path: Path | None, flag: str, *, make_parents: bool = False) -> None:
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


def check_finite(value: float | None, flag: str, *, positive: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        fail(f"{flag} must be a finite number {'> 0' if positive else '>= 0'}, got {value}")


def use_interpreter(device: str) -> bool:
    """Whether Triton kernels will run in Triton's interpreter (CPU tensors).

    The runtime switches the interpreter on itself, at the right moment: setting
    TRITON_INTERPRET here, after triton is imported, would leave triton.language's
    library functions compiled for the other mode.
    """
    return not device.startswith("cuda")


__all__ = ["BenchDtype", "CacheOpt", "CaptureOpt", "CodeOpt", "CodegenOpt", "DeviceOpt", "DumpOpt", "DynamicOpt",
           "Exporter", "FullgraphOpt", "FusionOpt", "InputsNameOpt", "JsonOpt", "Mode", "ModeOpt", "ModelFile",
           "ModelNameOpt", "NoCacheOpt", "RuntimeOpt", "cache_name", "check_cache_usable", "check_dump_dir",
           "check_dynamo_capture", "check_finite", "check_output_file", "options_or_exit", "resolve_device",
           "use_interpreter"]
