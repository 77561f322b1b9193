"""Exported artifacts (``.pipec`` files): a compiled model as one file, run by this package alone.

An artifact is a zip archive (every member stored uncompressed, fixed order, fixed
timestamps and permissions: the same inputs always give the same bytes)::

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

`pack_artifact` builds the bytes (the exporter, `pipec.export`, calls it);
`read_artifact` checks everything before anything runs: the member list against the
manifest (none added, none missing), every member's size and sha256, the manifest's
own digest, the IR documents (parsed and verified), that program, graph, kernel
sources, weights and manifest agree with each other. Any difference is an
`ArtifactError` with one line saying what. `load_artifact` then binds the weights and
returns a callable taking the user inputs, checked against the recorded guards
(count, dtypes, shapes, symbol ranges; `ArtifactInputError`).

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
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pipec_ir
from pipec_ir import Graph, KernelPlan, Program
from pipec_ir.symbolic import as_expr, expr_str, parse_expr
from .files import atomic_write

FORMAT = "pipec-artifact"
FORMAT_VERSION = (1, 0)
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


def _torch_dtype_name(t) -> str:
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
        if tuple(t.shape) != shape or _torch_dtype_name(t) != dtype:
            raise ArtifactError(f"{where}: weight {name!r} is {_torch_dtype_name(t)} {tuple(t.shape)}, "
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


# The archive is a plain zip (any zip tool lists and extracts it) written by the code below
# rather than by zipfile, so that its bytes depend on nothing but the members: every entry
# stored, dated 1980-01-01, mode 0644, no extra fields but zip64 ones (members or offsets
# past 4 GiB), no comments. A reader rebuilds these headers and compares them with the file,
# so no byte of the archive can change unnoticed.
_ZIP64_LIMIT = 0xFFFFFFFF  # sizes and offsets from here on need zip64 records
_ZIP_VERSION, _ZIP64_VERSION = 20, 45
_DOS_DATE, _DOS_TIME = (1 << 5) | 1, 0  # 1980-01-01 00:00:00
_UNIX_MODE = 0o100644 << 16


def _archive_layout(entries: Sequence[tuple[str, int, int]]) -> tuple[list[bytes], bytes]:
    """(local header of each member, central directory + end records) for (name, size, crc32) entries."""
    import struct

    local_headers, central, offset = [], [], 0
    for name, size, crc in entries:
        raw = name.encode("ascii")
        big_size, big_offset = size >= _ZIP64_LIMIT, offset >= _ZIP64_LIMIT
        version = _ZIP64_VERSION if big_size or big_offset else _ZIP_VERSION
        local_extra = struct.pack("<HHQQ", 1, 16, size, size) if big_size else b""
        stored = 0xFFFFFFFF if big_size else size
        header = struct.pack("<4s2B4HL2L2H", b"PK\x03\x04", version, 0, 0, 0, _DOS_TIME, _DOS_DATE, crc,
                             stored, stored, len(raw), len(local_extra)) + raw + local_extra
        local_headers.append(header)
        fields = ([size, size] if big_size else []) + ([offset] if big_offset else [])
        extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
        central.append(struct.pack("<4s4B4HL2L5H2L", b"PK\x01\x02", version, 3, version, 0, 0, 0, _DOS_TIME,
                                   _DOS_DATE, crc, stored, stored, len(raw), len(extra), 0, 0, 0, _UNIX_MODE,
                                   0xFFFFFFFF if big_offset else offset) + raw + extra)
        offset += len(header) + size
    directory = b"".join(central)
    count, cd_size, cd_offset = len(entries), len(directory), offset
    tail = b""
    if count >= 0xFFFF or cd_size >= _ZIP64_LIMIT or cd_offset >= _ZIP64_LIMIT:
        end64 = offset + cd_size
        tail += struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, _ZIP64_VERSION, _ZIP64_VERSION, 0, 0, count, count,
                            cd_size, cd_offset)
        tail += struct.pack("<4sLQL", b"PK\x06\x07", 0, end64, 1)
        count, cd_size, cd_offset = min(count, 0xFFFF), 0xFFFFFFFF, 0xFFFFFFFF
    tail += struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, cd_size, cd_offset, 0)
    return local_headers, directory + tail


def _zip_bytes(members: Sequence[tuple[str, bytes]]) -> bytes:
    headers, tail = _archive_layout([(name, len(data), zlib.crc32(data)) for name, data in members])
    parts = []
    for header, (_, data) in zip(headers, members):
        parts += [header, data]
    return b"".join(parts) + tail


def _split_archive(data: bytes, where: str) -> list[tuple[str, memoryview]]:
    """The members (name, bytes) of an artifact archive, where `_zip_bytes` would put them."""
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
        start = offset + 30 + len(info.filename) + (20 if info.file_size >= _ZIP64_LIMIT else 0)
        end = start + info.file_size
        if info.header_offset != offset or end > len(data):
            raise _tampered(where, "its zip layout is not the one pipec writes")
        members.append((info.filename, view[start:end]))
        offset = end
    return members


def _check_layout(data: bytes, members: Sequence[tuple[str, memoryview]], where: str) -> None:
    """Every byte outside the members is what `_zip_bytes` writes for them: same headers,
    same order, nothing before, between or after."""
    view = memoryview(data)
    headers, tail = _archive_layout([(n, len(m), zlib.crc32(m)) for n, m in members])
    offset = 0
    for header, (name, member) in zip(headers, members):
        if view[offset:offset + len(header)] != header:
            raise _tampered(where, f"the zip header of {name} differs from the one pipec writes (CRC, size, "
                                   "date or flags edited)")
        offset += len(header) + len(member)
    if view[offset:] != tail:
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
    _check_layout(data, members, where)
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


# ------------------------------------------------------------------ running


class LoadedArtifact:
    """A loaded artifact: `model(*inputs)` returns what the exported model returned.

    Inputs are the user inputs only (weights come from the file), checked against the
    recorded guards before anything runs. `run(list)` returns the flat output list.
    """

    def __init__(self, artifact: Artifact, runtime: str | None = None, *, kernel_dir: str | None = None,
                 autotune: bool = True) -> None:
        import torch

        from pipec_ir import CompileOptions, LoadContext

        from .exprs import compile_ints

        self.artifact = artifact
        self.manifest = artifact.manifest
        self.name = artifact.name
        self.sha256 = artifact.sha256
        runtime = runtime or self.manifest.get("runtime", "launch")
        if runtime not in RUNTIMES:
            raise ArtifactError(f"{artifact.path}: runtime {runtime!r} cannot run an artifact "
                                f"(use one of: {', '.join(RUNTIMES)})")
        self.runtime = runtime
        options = CompileOptions(runtime=runtime, autotune=autotune)
        context = LoadContext(kernel_dir=None if kernel_dir is None else str(kernel_dir))
        if runtime == "cudagraph" and torch.cuda.is_available():
            from .cudagraph import load_cudagraph
            self._runner = load_cudagraph(artifact.program, options, context)
        else:
            from .launch import load_launch
            self._runner = load_launch(artifact.program, options, context)

        self.inputs = artifact.inputs
        self.structure = self.manifest["output_structure"]
        roles = {i.name: i.role for i in artifact.graph.inputs}
        user = {spec.name: k for k, spec in enumerate(self.inputs)}
        # per program input: ("input", index into the user inputs) or ("weight", name)
        self._binding = tuple(("input", user[b.name]) if roles[b.name] == "input" else ("weight", b.name)
                              for b in artifact.program.inputs)
        self._weights = {torch.device("cpu"): artifact.weights}

        # the guards: each symbol is read from the first input dimension that is exactly it
        shapes = [[parse_expr(str(d)) for d in spec.shape] for spec in self.inputs]
        source: dict[str, tuple[int, int]] = {}
        for i, shape in enumerate(shapes):
            for d, e in enumerate(shape):
                if e.is_Symbol and e.name not in source:
                    source[e.name] = (i, d)
        ranges = {s["name"]: s for s in self.manifest["symbols"]}
        used = {s.name for shape in shapes for e in shape for s in e.free_symbols}
        unbound = sorted(used - set(source))
        if unbound:
            raise ArtifactError(f"{artifact.path}: size symbol(s) {', '.join(unbound)} are not the size of "
                                "any input dimension")
        self._symbols = tuple(sorted(source))
        self._symbol_source = tuple(source[s] for s in self._symbols)
        self._symbol_ranges = tuple((ranges.get(s, {}).get("min"), ranges.get(s, {}).get("max"))
                                    for s in self._symbols)
        self._expected = [compile_ints(shape, self._symbols) for shape in shapes]
        self._dtypes = tuple(getattr(torch, spec.dtype) for spec in self.inputs)

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.inputs)
        return f"<pipec artifact {self.name} ({ins}) runtime={self.runtime}>"

    # ---------------------------------------------------------- guards
    def _fail(self, message: str):
        raise ArtifactInputError(f"{self.name}: {message}")

    def _describe_expected(self, k: int, symvals) -> str:
        shape = self.inputs[k].shape
        expected = self._expected[k](*symvals)
        if all(isinstance(d, int) for d in shape):
            return str(tuple(expected))
        used = {s.name for d in shape for s in parse_expr(str(d)).free_symbols}
        bound = ", ".join(f"{s}={v}" for s, v in zip(self._symbols, symvals) if s in used)
        return f"({', '.join(map(str, shape))}) = {tuple(expected)} with {bound}"

    def check_inputs(self, inputs: Sequence):
        """Check the user inputs against the recorded guards; -> (symbol values, device)."""
        import torch

        specs = self.inputs
        if len(inputs) != len(specs):
            names = ", ".join(s.name for s in specs)
            self._fail(f"expects {len(specs)} input{'s' if len(specs) != 1 else ''} ({names}), got {len(inputs)}")
        for k, (t, spec, dtype) in enumerate(zip(inputs, specs, self._dtypes)):
            if not isinstance(t, torch.Tensor):
                self._fail(f"input {k} ({spec.name}) is not a tensor (got {type(t).__name__})")
            if t.dtype != dtype:
                self._fail(f"input {k} ({spec.name}) has dtype {_torch_dtype_name(t)}, expected {spec.dtype}")
            if t.dim() != len(spec.shape):
                self._fail(f"input {k} ({spec.name}) has shape {tuple(t.shape)} ({t.dim()} dims), expected "
                           f"({', '.join(map(str, spec.shape))}) ({len(spec.shape)} dims)")
        symvals = tuple(int(inputs[k].shape[d]) for k, d in self._symbol_source)
        for value, sym, (k, d), (lo, hi) in zip(symvals, self._symbols, self._symbol_source, self._symbol_ranges):
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                self._fail(f"input {k} ({specs[k].name}) has size {value} in dimension {d}, but {sym} must be in "
                           f"[{lo}, {hi if hi is not None else 'inf'}]")
        for k, (t, spec) in enumerate(zip(inputs, specs)):
            if tuple(t.shape) != self._expected[k](*symvals):
                self._fail(f"input {k} ({spec.name}) has shape {tuple(t.shape)}, expected "
                           f"{self._describe_expected(k, symvals)}")
        device = inputs[0].device if inputs else torch.device("cpu")
        for k, t in enumerate(inputs):
            if t.device != device:
                self._fail(f"input {k} ({specs[k].name}) is on {t.device}, input 0 is on {device}")
        return symvals, device

    # ---------------------------------------------------------- running
    def weights_on(self, device) -> dict:
        import torch

        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        found = self._weights.get(device)
        if found is None:
            cpu = self._weights[torch.device("cpu")]
            found = self._weights[device] = {k: t.to(device) for k, t in cpu.items()}
        return found

    def run(self, inputs: Sequence) -> list:
        """The flat list of outputs (program order) for the user inputs."""
        inputs = list(inputs)
        _, device = self.check_inputs(inputs)
        weights = self.weights_on(device)
        args = [inputs[ref] if kind == "input" else weights[ref] for kind, ref in self._binding]
        return list(self._runner(args))

    def __call__(self, *inputs):
        return unflatten(self.structure, self.run(inputs))

    def random_inputs(self, seed: int = 0, device=None) -> tuple:
        """Inputs made from the recorded specs (symbols at their example sizes), reproducibly."""
        import torch

        gen = torch.Generator().manual_seed(seed)
        hints = {s["name"]: s["hint"] for s in self.manifest["symbols"]}
        values = tuple(hints.get(s, 2) for s in self._symbols)
        out = []
        for k, dtype in enumerate(self._dtypes):
            shape = self._expected[k](*values)
            if dtype.is_floating_point:
                t = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
            elif dtype == torch.bool:
                t = torch.randint(0, 2, shape, generator=gen).bool()
            else:
                t = torch.randint(0, 8, shape, generator=gen).to(dtype)
            out.append(t if device is None else t.to(device))
        return tuple(out)


def load_artifact(path: str | os.PathLike | bytes, runtime: str | None = None, *, sha256: str | None = None,
                  kernel_dir: str | None = None, autotune: bool = True) -> LoadedArtifact:
    """Check and load an artifact: a callable taking the user inputs (weights are bound from the file).

    `runtime` overrides the recorded one ("launch" or "cudagraph"); `sha256` pins the
    file's digest. Raises `ArtifactError` (one line) for a file that is not a pipec
    artifact, was modified, or whose parts disagree.
    """
    return LoadedArtifact(read_artifact(path, sha256=sha256), runtime, kernel_dir=kernel_dir, autotune=autotune)


__all__ = ["Artifact", "ArtifactError", "ArtifactInputError", "FORMAT", "FORMAT_VERSION", "InputSpec",
           "LoadedArtifact", "TamperedArtifactError", "describe", "flat_structure", "load_artifact",
           "pack_artifact", "read_artifact", "unflatten", "versions", "write_artifact"]
