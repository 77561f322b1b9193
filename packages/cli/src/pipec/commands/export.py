"""`pipec export` (a whole model into one artifact file) and `pipec run` (an artifact, with the
runtime package alone)."""

from __future__ import annotations

import enum
import json
import os
import time
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..errors import PipecError, find_pipec_error
from ..exits import fail, one_line
from ..model_file import load_model_file, to_device
from ..render import StageProgress, fmt_error, fmt_shape, stdout
from .arguments import (
    CodegenOpt,
    DeviceOpt,
    DumpOpt,
    FusionOpt,
    InputsNameOpt,
    JsonOpt,
    Mode,
    ModelFile,
    ModelNameOpt,
    ModeOpt,
    RuntimeOpt,
    check_dump_dir,
    check_output_file,
    resolve_device,
)


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

    from ..artifact import ExportError, check_artifact, export_artifact, export_options
    from ..pipeline import Session

    try:
        export_options(name=model_file.stem, fusion=fusion, runtime=runtime, mode=mode.value, codegen=codegen,
                       dump_dir=str(dump_ir) if dump_ir else None)
    except ValueError as exc:
        fail(str(exc))
    device = resolve_device(device)  # used by --check; a bad value is refused either way
    check_dump_dir(dump_ir)
    check_output_file(output, "--output", make_parents=True)
    module, example, name = load_model_file(model_file, model, inputs)
    if not all(isinstance(t, torch.Tensor) for t in example):
        fail(f"`{inputs}` in {model_file.name} must hold tensors only to be exported")
    try:
        with torch.no_grad():
            expected = module(*example)
    except Exception as exc:
        fail(f"running {name} eagerly on its example inputs failed: {one_line(exc)}")
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
        fail(str(found) if found else f"exporting {name} failed: {one_line(exc)}", 1)
    if not check:
        device = None  # nothing ran
    if check:
        try:
            _, moved = to_device(None, example, device)
            result.max_error, result.mismatch = check_artifact(output, moved, expected)
        except Exception as exc:
            if os.environ.get("PIPEC_TRACEBACK"):
                traceback.print_exc()
            fail(f"running the exported {name} failed: {one_line(exc)}", 1)
    if json_out:
        print(json.dumps({**result.to_dict(), "device": device}, indent=2))
    else:
        table = Table(title=f"pipec export · {name}", show_header=False, title_justify="left")
        table.add_column("what", style="bold")
        table.add_column("value", overflow="fold")
        table.add_row("artifact", f"{result.path} ({result.nbytes} bytes)")
        table.add_row("sha256", result.sha256)
        table.add_row("inputs", ", ".join(f"{i['name']}: {i['dtype']}{fmt_shape(i['shape'])}" for i in result.inputs))
        if result.symbols:
            table.add_row("symbols", ", ".join(
                f"{s['name']} in [{s['min']}, {s['max'] if s['max'] is not None else 'inf'}]" for s in result.symbols))
        table.add_row("outputs", ", ".join(f"{o['dtype']}{fmt_shape(o['shape'])}" if o["dtype"] else "None"
                                           for o in result.outputs))
        table.add_row("weights", f"{result.weights} tensors, {result.weight_bytes} bytes")
        table.add_row("kernels", f"{len(result.kernels)}" + (f" ({', '.join(result.kernels)})" if result.kernels else ""))
        if check:
            table.add_row("max error vs eager", fmt_error(result.max_error) + ("  MISMATCH" if result.mismatch else ""))
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
        fail(f"{path}: not a readable safetensors file ({one_line(exc)})")
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

    from ..pipeline import env_kernel_dir

    if (inputs_file is None) == (not random):
        fail("give either --inputs FILE.safetensors or --random")
    device = resolve_device(device)
    check_output_file(save_outputs, "--save-outputs")
    try:
        loaded = load_artifact(artifact, runtime.value if runtime else None, sha256=sha256, kernel_dir=env_kernel_dir())
    except ArtifactError as exc:
        fail(str(exc))
    except Exception as exc:
        if os.environ.get("PIPEC_TRACEBACK"):
            traceback.print_exc()
        fail(f"loading {artifact} failed: {one_line(exc)}", 1)
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
        fail(f"running {loaded.name} failed: {one_line(exc)}", 1)
    seconds = time.perf_counter() - start
    names = [o["name"] for o in loaded.manifest["outputs"]]
    summary = [_tensor_summary(i, n, t) for i, (n, t) in enumerate(zip(names, outputs))]
    if save_outputs is not None:
        from safetensors.torch import save_file

        try:
            save_file({str(i): t.detach().to("cpu").contiguous() for i, t in enumerate(outputs)
                       if isinstance(t, torch.Tensor)}, str(save_outputs))
        except Exception as exc:  # noqa: BLE001 - safetensors' SafetensorError is none of OSError, ValueError
            fail(f"cannot write {str(save_outputs)!r}: {one_line(exc)}")
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
            table.add_row(str(s["index"]), str(s["name"]), fmt_shape(s["shape"]), s["dtype"], f"{s['sum']:.6g}",
                          s["sha256"][:16])
    stdout.print(table, markup=False)
