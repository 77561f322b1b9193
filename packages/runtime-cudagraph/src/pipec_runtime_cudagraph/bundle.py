"""Exported artifacts (``.pipec`` files), the file format: a compiled model as one file, run
by this package alone (`bundle_loader.load_artifact`).

An artifact is a zip archive written by Python's zipfile (every member stored uncompressed,
fixed order, fixed timestamps and permissions: the same inputs always give the same bytes)::

    manifest.json          what the artifact is: format version, the versions it was made with,
                           the user inputs (names, shapes with symbols, dtypes), symbol ranges
                           (the guards), weights, outputs, and the size and sha256 of every
                           member below, in archive order
    manifest.sha256        sha256 of manifest.json (hex, one line)
    graph.json             the IR documents (pipec-ir canonical JSON)
    kernel_plan.json
    program.json
    kernels/<name>.py      each Triton kernel's source, for reading (program.json holds the same text)
    weights.safetensors    parameters and buffers, named as the graph inputs they bind

Format versions: 1.0 was framed by pipec's own zip writer, 1.1 by zipfile; the two are the
same bytes below 2 GiB, and both are read (`_check_layout`).

`pack_artifact` builds the bytes (the exporter, `pipec.export`, calls it);
`read_artifact` checks everything before anything runs: the member list against the
manifest (none added, none missing), every member's size and sha256, the manifest's
own digest, every byte of the zip framing, the IR documents (parsed and verified), that
program, graph, kernel sources, weights and manifest agree with each other. Any difference
is an `ArtifactError` with one line saying what. `load_artifact` (bundle_loader.py) then
binds the weights and returns a callable taking the user inputs, checked against the
recorded guards (count, dtypes, shapes, symbol ranges; `ArtifactInputError`).

No pickle anywhere: JSON and safetensors only. This module imports pipec_ir,
this runtime, torch and safetensors — never capture, fusion, codegen or Dynamo.

Trust: the digests detect corrupted or edited artifacts, not a forger who rewrites
them; an artifact holds Python (Triton kernel sources) that is imported when it is
loaded, so load only artifacts you trust, or pin the file's sha256 (`sha256=`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import platform
import re
import struct
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pipec_ir
from pipec_ir import Graph, KernelPlan, Program
from pipec_ir.symbolic import as_expr, expr_str

from .files import atomic_write

FORMAT = "pipec-artifact"
FORMAT_VERSION = (1, 1)  # 1.1: framed by Python's zipfile (see _zip_bytes); 1.0 files still read
MANIFEST = "manifest.json"
MANIFEST_SHA256 = "manifest.sha256"
GRAPH = "graph.json"
PLAN = "kernel_plan.json"
PROGRAM = "program.json"
WEIGHTS = "weights.safetensors"
KERNELS = "kernels/"
RUNTIMES = ("launch", "cudagraph")

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest date zip can store: no build time in the bytes
_MEMBER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*")
_VERSIONED = ("pipec-ir", "pipec-runtime-cudagraph", "torch", "triton", "safetensors")


class ArtifactError(ValueError):
    """The file is not a usable pipec artifact (missing, not one, tampered with, inconsistent)."""


class TamperedArtifactError(ArtifactError):
    """A member's bytes, the member list or the manifest differ from what the manifest records."""


class ArtifactInputError(ValueError):
    """The inputs given to a loaded artifact do not match its recorded guards."""


# ------------------------------------------------------------------ what the documents say


def _dim(expr) -> int | str:
    """A shape entry for JSON: an int, or the symbolic expression as a string."""
    expr = as_expr(expr)
    return int(expr) if expr.is_Integer else expr_str(expr)


def _shape(t) -> list:
    return [_dim(e) for e in t.shape]


def describe(graph: Graph, program: Program) -> dict:
    """The manifest sections derived from the documents (checked again when an artifact is read)."""
    roles = {i.name: i.role for i in graph.inputs}
    types = graph.types()
    inputs, weights = [], []
    for b in program.inputs:
        entry = {"name": b.name, "shape": _shape(b.type), "dtype": b.type.dtype}
        if roles.get(b.name, "input") == "input":
            inputs.append(entry)
        else:
            weights.append({**entry, "role": roles[b.name]})
    outputs = []
    for i, name in enumerate(program.outputs):
        t = types.get(name) if name is not None else None
        outputs.append({"index": i, "name": name, "shape": _shape(t) if t is not None else None,
                        "dtype": t.dtype if t is not None else None})
    symbols = [{"name": s.name, "min": s.lower, "max": s.upper, "hint": s.hint} for s in program.symbols]
    return {"inputs": inputs, "weights": weights, "outputs": outputs, "symbols": symbols}


def _interface(graph: Graph) -> tuple:
    """What a caller of `graph` sees: its inputs, and the type of each output."""
    types = {i.name: i.type for i in graph.inputs}
    types.update((n.name, n.type) for n in graph.nodes)
    return graph.inputs, tuple(None if o is None else types.get(o) for o in graph.outputs)


def _check_documents(graph: Graph, plan: KernelPlan, program: Program, where: str) -> None:
    # fusion may rewrite the graph it plans (recomputing a cheap value in its reader), so the
    # plan's graph is graph.json itself or one with the same inputs and output types
    if plan.graph != graph and _interface(plan.graph) != _interface(graph):
        raise ArtifactError(f"{where}: kernel_plan.json is not a plan of graph.json")
    graph_inputs = [i.name for i in graph.inputs]
    program_inputs = [b.name for b in program.inputs]
    if graph_inputs != program_inputs:
        raise ArtifactError(f"{where}: program.json's inputs ({', '.join(program_inputs)}) are not "
                            f"graph.json's ({', '.join(graph_inputs)})")
    if len(program.outputs) != len(graph.outputs):
        raise ArtifactError(f"{where}: program.json has {len(program.outputs)} outputs, graph.json "
                            f"{len(graph.outputs)}")


def _weight_specs(graph: Graph) -> dict[str, tuple[tuple[int, ...], str]]:
    specs = {}
    for i in graph.inputs:
        if i.role == "input":
            continue
        shape = tuple(as_expr(e) for e in i.type.shape)
        if any(not e.is_Integer for e in shape):
            raise ArtifactError(f"weight {i.name!r} has a symbolic shape {i.type}; weights must be static")
        specs[i.name] = (tuple(int(e) for e in shape), i.type.dtype)
    return specs


def torch_dtype_name(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def _check_weights(weights: Mapping, graph: Graph, where: str) -> None:
    specs = _weight_specs(graph)
    missing = sorted(set(specs) - set(weights))
    extra = sorted(set(weights) - set(specs))
    if missing:
        raise ArtifactError(f"{where}: no weight for graph input(s) {', '.join(missing)}")
    if extra:
        raise ArtifactError(f"{where}: weight(s) {', '.join(extra)} are not graph inputs")
    for name, (shape, dtype) in specs.items():
        t = weights[name]
        if tuple(t.shape) != shape or torch_dtype_name(t) != dtype:
            raise ArtifactError(f"{where}: weight {name!r} is {torch_dtype_name(t)} {tuple(t.shape)}, "
                                f"the graph expects {dtype} {shape}")


def _check_structure(structure, count: int, where: str) -> None:
    """An output structure: an output index, or {"tuple"|"list": [...]}, {"dict": [[key, s], ...]}."""
    seen: list[int] = []

    def walk(s) -> None:
        if isinstance(s, int) and not isinstance(s, bool):
            if not 0 <= s < count:
                raise ArtifactError(f"{where}: output structure refers to output {s} of {count}")
            seen.append(s)
        elif isinstance(s, dict) and len(s) == 1 and set(s) <= {"tuple", "list"} and isinstance(
                next(iter(s.values())), list):
            for item in next(iter(s.values())):
                walk(item)
        elif isinstance(s, dict) and set(s) == {"dict"} and isinstance(s["dict"], list):
            for pair in s["dict"]:
                if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                    raise ArtifactError(f"{where}: malformed output structure")
                walk(pair[1])
        else:
            raise ArtifactError(f"{where}: malformed output structure")

    walk(structure)
    if sorted(seen) != list(range(count)):
        raise ArtifactError(f"{where}: output structure does not use every output exactly once")


def flat_structure(count: int):
    """The structure of a model returning its outputs as they are: one tensor, or a tuple."""
    return 0 if count == 1 else {"tuple": list(range(count))}


def unflatten(structure, outputs: Sequence):
    if isinstance(structure, int):
        return outputs[structure]
    (kind, items), = structure.items()
    if kind == "tuple":
        return tuple(unflatten(s, outputs) for s in items)
    if kind == "list":
        return [unflatten(s, outputs) for s in items]
    return {k: unflatten(s, outputs) for k, s in items}


# ------------------------------------------------------------------ writing


def versions(distributions: Sequence[str] = _VERSIONED) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in distributions:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _canonical_json(data) -> bytes:
    return (json.dumps(data, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n").encode()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# The archive is a plain zip written by Python's zipfile (any zip tool lists and extracts it),
# its bytes depending on nothing but the members and their order: every member stored (no
# compression), dated 1980-01-01 (the earliest date zip can store: no build time in the bytes),
# mode 0644, made on Unix, no comments. A reader writes the members again the same way and
# compares every byte with the file (`_check_layout`), so no byte can change unnoticed.
# Format 1.0 was framed by pipec's own zip writer: byte for byte what zipfile writes below
# 2 GiB (the tests check it against a 1.0 file); above, zipfile starts zip64 records at 2 GiB
# where that writer started them at 4 GiB, which is why 1.1 exists.
_UNIX_MODE = 0o100644 << 16
_UNIX = 3  # zip's "made by" system


def _zip_bytes(members: Sequence[tuple[str, bytes | memoryview]]) -> bytes:
    """The archive of `members` (name, bytes), in that order."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
            info.create_system = _UNIX  # whatever platform writes it
            info.external_attr = _UNIX_MODE
            archive.writestr(info, data)
    return buffer.getvalue()


def _split_archive(data: bytes, where: str) -> list[tuple[str, memoryview]]:
    """The members (name, bytes) of an artifact archive: stored, one after the other from the
    first byte on."""
    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise ArtifactError(f"{where}: not a pipec artifact (not a readable zip archive: {exc})") from None
    view = memoryview(data)
    names = [i.filename for i in infos]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise _tampered(where, f"member {duplicates[0]} appears twice")
    if MANIFEST not in names:
        raise ArtifactError(f"{where}: not a pipec artifact (no {MANIFEST})")
    for info in infos:
        if not _MEMBER_NAME.fullmatch(info.filename) or info.compress_type != zipfile.ZIP_STORED:
            raise _tampered(where, f"member {info.filename!r} is not stored the way pipec writes members")
    members, offset = [], 0
    for info in infos:
        if info.header_offset != offset or offset + 30 > len(data):
            raise _tampered(where, "its zip layout is not the one pipec writes")
        name_length, extra_length = struct.unpack_from("<2H", data, offset + 26)  # of the local header
        start = offset + 30 + name_length + extra_length
        end = start + info.file_size
        if bytes(view[offset + 30:offset + 30 + name_length]) != info.filename.encode("ascii") or end > len(data):
            raise _tampered(where, "its zip layout is not the one pipec writes")
        members.append((info.filename, view[start:end]))
        offset = end
    return members


def _check_layout(data: bytes, members: Sequence[tuple[str, memoryview]], version: tuple[int, int],
                  where: str) -> None:
    """Every byte outside the members is what `_zip_bytes` writes for them: same headers, same
    order, nothing before, between or after. (A format 1.0 archive over 2 GiB, framed by the
    writer before zipfile, is checked member by member instead: `_check_legacy_layout`.)"""
    if _zip_bytes(members) == data:
        return
    if tuple(version) == (1, 0) and len(data) > zipfile.ZIP64_LIMIT:
        _check_legacy_layout(data, members, where)
        return
    raise _tampered(where, "its zip headers or directory differ from what pipec writes for its members "
                           "(CRC, size, date, flags or bytes after the directory edited)")


def _check_legacy_layout(data: bytes, members: Sequence[tuple[str, memoryview]], where: str) -> None:
    """A format 1.0 archive whose zip64 records zipfile places otherwise: the members are where
    `_split_archive` found them, their CRCs and dates are pipec's, the directory follows the
    last one and the file ends with the end record, without a comment. Their contents are
    checked against the manifest; the directory's other fields are not compared byte for byte."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    infos = archive.infolist()
    for info, (_, member) in zip(infos, members):
        if zlib.crc32(member) != info.CRC or info.date_time != _ZIP_DATE:
            raise _tampered(where, f"the zip header of {info.filename} differs from the one pipec writes")
    end = 0
    if infos:
        last = infos[-1]
        name_length, extra_length = struct.unpack_from("<2H", data, last.header_offset + 26)
        end = last.header_offset + 30 + name_length + extra_length + last.file_size
    if archive.comment or archive.start_dir != end or data[-22:-18] != b"PK\x05\x06" or data[-2:] != b"\0\0":
        raise _tampered(where, "the zip directory or the bytes after it differ from what pipec writes")


def pack_artifact(*, graph: Graph, plan: KernelPlan, program: Program, weights: Mapping[str, Any],
                  name: str | None = None, runtime: str = "launch", output_structure=None,
                  made_with: Mapping[str, Any] | None = None, stages: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of an artifact holding these documents and weights ({graph input name: tensor}).

    `output_structure` says how the model returns its outputs (see `unflatten`; default:
    one tensor, or a tuple); `made_with` adds versions (pipec, the stages' distributions)
    to those of this package, pipec-ir, torch, triton, safetensors and Python; `stages`
    records which implementation ran each stage.
    """
    import torch
    from safetensors.torch import save

    name = name or program.name
    where = f"artifact {name}"
    for doc in (graph, plan, program):
        pipec_ir.verify(doc)
    _check_documents(graph, plan, program, where)
    if runtime not in RUNTIMES:
        raise ArtifactError(f"{where}: runtime {runtime!r} cannot run from an artifact "
                            f"(built-in runtimes: {', '.join(RUNTIMES)})")
    tensors = {}
    for key, t in weights.items():
        if not isinstance(t, torch.Tensor):
            raise ArtifactError(f"{where}: weight {key!r} is a {type(t).__name__}, not a tensor")
        # a private dense CPU copy each: safetensors refuses tensors that share memory (tied weights)
        tensors[key] = t.detach().to("cpu", copy=True).contiguous()
    _check_weights(tensors, graph, where)
    structure = flat_structure(len(program.outputs)) if output_structure is None else output_structure
    _check_structure(structure, len(program.outputs), where)

    members: list[tuple[str, bytes]] = [
        (GRAPH, pipec_ir.dumps(graph).encode()),
        (PLAN, pipec_ir.dumps(plan).encode()),
        (PROGRAM, pipec_ir.dumps(program).encode()),
    ]
    for k in program.kernels:
        members.append((f"{KERNELS}{k.name}.py", k.source.encode("utf-8")))
    members.append((WEIGHTS, save(dict(sorted(tensors.items())))))
    for member, _ in members:
        if not _MEMBER_NAME.fullmatch(member):
            raise ArtifactError(f"{where}: {member!r} cannot be an archive member name")

    manifest = {
        "format": FORMAT,
        "format_version": list(FORMAT_VERSION),
        "name": name,
        "ir_version": list(pipec_ir.VERSION),
        "made_with": {**versions(), **dict(made_with or {})},
        "stages": dict(stages or {}),
        "runtime": runtime,
        **describe(graph, program),
        "output_structure": structure,
        "kernels": [k.name for k in program.kernels],
        "members": [{"name": m, "size": len(data), "sha256": _sha256(data)} for m, data in members],
    }
    manifest_bytes = _canonical_json(manifest)
    return _zip_bytes([(MANIFEST, manifest_bytes), (MANIFEST_SHA256, (_sha256(manifest_bytes) + "\n").encode()),
                       *members])


def write_artifact(path: str | os.PathLike, data: bytes) -> Path:
    """Write the artifact bytes atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, data, mode=0o644)


# ------------------------------------------------------------------ reading


@dataclass(frozen=True)
class InputSpec:
    """One user input: its name, shape (ints and symbol expressions as strings) and dtype."""
    name: str
    shape: tuple[int | str, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Artifact:
    """A checked artifact: its manifest, IR documents and weights (CPU tensors)."""
    path: str
    sha256: str  # of the whole file
    manifest: dict
    graph: Graph
    plan: KernelPlan
    program: Program
    weights: dict

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def inputs(self) -> tuple[InputSpec, ...]:
        return tuple(InputSpec(i["name"], tuple(i["shape"]), i["dtype"]) for i in self.manifest["inputs"])


def _tampered(where: str, what: str) -> TamperedArtifactError:
    return TamperedArtifactError(f"{where}: {what}; the artifact was modified or damaged, refusing to load it")


def read_artifact(source: str | os.PathLike | bytes, *, sha256: str | None = None) -> Artifact:
    """Read and check an artifact (a path or its bytes); nothing in it runs before every check passed.

    `sha256` pins the whole file's digest (as `sha256sum` prints it).
    """
    if isinstance(source, (bytes, bytearray)):
        where, data = "artifact", bytes(source)
    else:
        where = str(source)
        try:
            data = Path(source).read_bytes()
        except FileNotFoundError:
            raise ArtifactError(f"{where}: no such file") from None
        except OSError as exc:
            raise ArtifactError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    digest = _sha256(data)
    if sha256 is not None and digest != sha256.strip().lower():
        raise _tampered(where, f"its sha256 is {digest}, expected {sha256.strip().lower()}")
    members = _split_archive(data, where)
    names = [n for n, _ in members]
    by_name = dict(members)
    if MANIFEST_SHA256 not in by_name:
        raise _tampered(where, f"{MANIFEST_SHA256} is missing")

    def member(name: str, size: int | None = None) -> bytes:
        content = by_name[name]
        if size is not None and len(content) != size:
            raise _tampered(where, f"{name} is {len(content)} bytes, the manifest says {size}")
        return bytes(content)

    manifest_bytes = member(MANIFEST)
    recorded = member(MANIFEST_SHA256).decode("ascii", "replace").strip()
    if _sha256(manifest_bytes) != recorded:
        raise _tampered(where, f"{MANIFEST} does not match {MANIFEST_SHA256}")
    try:
        manifest = json.loads(manifest_bytes)
    except ValueError:
        raise _tampered(where, f"{MANIFEST} is not valid JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArtifactError(f"{where}: not a pipec artifact ({MANIFEST} has no 'format': '{FORMAT}')")
    version = manifest.get("format_version")
    if not (isinstance(version, list) and len(version) == 2 and all(isinstance(v, int) for v in version)):
        raise ArtifactError(f"{where}: {MANIFEST} has no valid format_version")
    if version[0] != FORMAT_VERSION[0]:
        raise ArtifactError(f"{where}: artifact format {version[0]}.{version[1]} is not supported (this "
                            f"pipec-runtime-cudagraph reads {FORMAT_VERSION[0]}.x); export it again")
    if _canonical_json(manifest) != manifest_bytes:
        raise _tampered(where, f"{MANIFEST} is not in canonical form")
    where = f"{where} ({manifest.get('name', '?')})"

    listed = manifest.get("members")
    if not (isinstance(listed, list) and all(
            isinstance(m, dict) and isinstance(m.get("name"), str) and isinstance(m.get("size"), int)
            and isinstance(m.get("sha256"), str) for m in listed)):
        raise ArtifactError(f"{where}: {MANIFEST} has no valid member list")
    expected = [MANIFEST, MANIFEST_SHA256] + [m["name"] for m in listed]
    added = [n for n in names if n not in expected]
    if added:
        raise _tampered(where, f"member {added[0]} is not listed in {MANIFEST}")
    removed = [n for n in expected if n not in by_name]
    if removed:
        raise _tampered(where, f"member {removed[0]} listed in {MANIFEST} is missing")
    if names != expected:
        raise _tampered(where, "its members are not in the order the manifest lists them")
    contents: dict[str, bytes] = {}
    for m in listed:
        data_m = member(m["name"], m["size"])
        if _sha256(data_m) != m["sha256"]:
            raise _tampered(where, f"{m['name']} does not match its sha256 in {MANIFEST}")
        contents[m["name"]] = data_m
    _check_layout(data, members, version, where)
    for required in (GRAPH, PLAN, PROGRAM, WEIGHTS):
        if required not in contents:
            raise ArtifactError(f"{where}: {required} is missing")

    try:
        graph = pipec_ir.loads(contents[GRAPH], kind="graph")
        plan = pipec_ir.loads(contents[PLAN], kind="kernel_plan")
        program = pipec_ir.loads(contents[PROGRAM], kind="program")
    except pipec_ir.IRError as exc:
        raise ArtifactError(f"{where}: {exc}") from None
    _check_documents(graph, plan, program, where)

    kernel_members = {n for n in contents if n.startswith(KERNELS)}
    sources = {f"{KERNELS}{k.name}.py": k.source.encode("utf-8") for k in program.kernels}
    if kernel_members != set(sources) or any(contents[n] != s for n, s in sources.items()):
        raise ArtifactError(f"{where}: the kernels/ sources are not program.json's kernels")
    others = set(contents) - kernel_members - {GRAPH, PLAN, PROGRAM, WEIGHTS}
    if others:
        raise ArtifactError(f"{where}: unexpected member {sorted(others)[0]}")

    derived = describe(graph, program)
    for key, value in derived.items():
        if manifest.get(key) != value:
            raise ArtifactError(f"{where}: the manifest's {key!r} do not match program.json")
    if manifest.get("kernels") != [k.name for k in program.kernels]:
        raise ArtifactError(f"{where}: the manifest's 'kernels' do not match program.json")
    _check_structure(manifest.get("output_structure"), len(program.outputs), where)

    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        weights = load(contents[WEIGHTS])
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise ArtifactError(f"{where}: {WEIGHTS} is not a valid safetensors file ({exc})") from None
    _check_weights(weights, graph, where)
    return Artifact(path=str(source) if not isinstance(source, (bytes, bytearray)) else "<bytes>",
                    sha256=digest, manifest=manifest, graph=graph, plan=plan, program=program, weights=weights)


__all__ = ["Artifact", "ArtifactError", "ArtifactInputError", "FORMAT", "FORMAT_VERSION", "InputSpec", "RUNTIMES",
           "TamperedArtifactError", "describe", "flat_structure", "pack_artifact", "read_artifact",
           "torch_dtype_name", "unflatten", "versions", "write_artifact"]
