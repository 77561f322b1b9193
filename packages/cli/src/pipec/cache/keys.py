"""Cache keys: sha256 of everything that can change a stage's output.

A stage's key is built from the stage, the implementation's registry name, the
distribution that registered it and its version, a digest of the source files of
the distributions whose code makes the output (any install kind; a distribution without a RECORD
where its packages are imported from), the pipec-ir version, `CompileOptions.key()`
(without the runtime's `load_options`) and the digest
of the stage's input: an IR document's canonical JSON, or for the capture stage
`graph_module_digest` of the ATen fx GraphModule it lowers.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlparse

import pipec_ir
from pipec_ir import CompileOptions
from pipec_ir.registry import distribution_of

KEY_FORMAT = 2  # bump when what goes into a key changes meaning

# ---------------------------------------------------------------- stage keys


# options only the front end reads (what to do when a graph fails, whether AOTAutograd's cache
# holds its graphs): no stage output depends on them
FRONT_END_OPTIONS = ("eager_fallback", "aot_cache")


def stage_key(stage: str, entry: pipec_ir.Entry, options: CompileOptions, input_digest: str,
              load_options: Iterable[str] = ()) -> str:
    """The cache key of running `entry` (a Registry entry of `stage`) on an input with `input_digest`.
    `load_options`: the options the chosen runtime reads only when it loads a Program (its
    `load_options`); they cannot change what capture, fusion or codegen produce, so they stay out."""
    parts = {
        "format": KEY_FORMAT,
        "stage": stage,
        "impl": entry.name,
        "distribution": entry.distribution,
        "version": entry.version,
        "code": implementation_fingerprint(entry, torch=stage == "capture"),
        "options": options.key(exclude=(*load_options, *FRONT_END_OPTIONS)),
        "input": input_digest,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def text_digest(text: str | bytes) -> str:
    """Digest of an IR document's canonical JSON (equals pipec_ir.digest(doc) for its text)."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def implementation_fingerprint(entry: pipec_ir.Entry, *, torch: bool = False) -> tuple:
    """The code that produces a stage's output: for the registering distribution, the one that
    ships the implementation's class and pipec-ir (and torch for capture), its version and a
    digest of its source files, for every install kind (a plugin reinstalled at the same version
    with changed code gets new keys); code outside any distribution: its module file's digest."""
    module = type(entry.impl).__module__
    shipped_by = _shipped_by(module)
    dists = {entry.distribution, shipped_by, "pipec-ir"} | ({"torch"} if torch else set())
    out = tuple((d, distribution_fingerprint(d)) for d in sorted(dists) if d != "unknown")
    if shipped_by == "unknown":  # code outside any distribution (a test, a script)
        out += ((module, module_fingerprint(module)),)
    return out


@functools.cache
def _shipped_by(module: str) -> str:
    return distribution_of(module)[0]


def distribution_fingerprint(dist: str) -> str:
    """`version+src.<digest>`: the version and a digest of the distribution's source files
    (an editable install: the files under its source tree; any other: the files its RECORD
    lists, or for a distribution whose RECORD is over `_LARGE_RECORD` bytes (torch) the RECORD
    itself, which holds the sha256 of every file installed). "0" for one not installed.

    Cheap on repeated calls: the file list is kept while the RECORD is unchanged, and a file's
    digest while its mtime and size are (`file_digest`)."""
    found = _distribution_sources(dist)
    if found is None:
        return "0"
    version, files = found
    h = hashlib.sha256()
    for name, path in files:
        h.update(name.encode() + b"\0" + file_digest(path).encode() + b"\0")
    return f"{version}+src.{h.hexdigest()[:16]}"


_LARGE_RECORD = 256 * 1024  # bytes (~2500 files): reading so many files per process costs too much
_SKIP_DIRS = {"tests", "__pycache__", "build", "dist", "node_modules"}
_SOURCE_SUFFIXES = {".py", ".json", ".toml", ".txt", ".j2", ".jinja"}
# distribution -> (RECORD path, its stat, version, [(name, path)])
_SOURCES: dict[str, tuple[str, tuple, str, list]] = {}


def _distribution_sources(dist: str) -> tuple[str, list[tuple[str, str]]] | None:
    cached = _SOURCES.get(dist)
    if cached is not None and _stat(cached[0]) == cached[1]:
        return cached[2], cached[3]
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    record = _record_path(d)
    stamp = _stat(record) if record else None
    source = _editable_source(d)
    if source is not None:
        files = [(rel.as_posix(), str(source / rel)) for rel in _tree_files(source)]
    elif stamp is not None and stamp[1] > _LARGE_RECORD:
        files = [("RECORD", record)]  # not parsed: torch's lists ~15000 files
    else:
        files = (_imported_files(d) if stamp is None else None) \
            or sorted((f.as_posix(), str(d.locate_file(f))) for f in d.files or [] if _is_source(f))
    # without a RECORD (stamp None) nothing says when to look again: once per process
    _SOURCES[dist] = (record, stamp, d.version or "0", files)
    return d.version or "0", files


def _imported_files(d: importlib.metadata.Distribution) -> list[tuple[str, str]] | None:
    """The source files of the top-level packages a distribution without a RECORD names
    (top_level.txt), where Python imports them from; None where it names none found.

    Such a distribution is most often a setuptools `.egg-info` beside a source tree put on
    `sys.path`: its SOURCES.txt lists paths relative to the project, which resolve nowhere from
    the .egg-info, so digesting them gave a key that never changed while the code did, and
    AOTAutograd's cache served graphs lowered by old code."""
    files = []
    for name in (d.read_text("top_level.txt") or "").split():
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            root = Path(next(iter(spec.submodule_search_locations)))
            files += [(f"{name}/{rel.as_posix()}", str(root / rel)) for rel in _tree_files(root)]
        elif spec.origin:
            files.append((Path(spec.origin).name, spec.origin))
    return sorted(files) or None


def _record_path(d: importlib.metadata.Distribution) -> str:
    path = getattr(d, "_path", None)  # a PathDistribution's .dist-info directory
    if path is not None:
        return str(Path(path) / "RECORD") if (Path(path) / "RECORD").is_file() else ""
    listed = [f for f in (d.files or []) if f.name == "RECORD" and f.parent.name.endswith(".dist-info")]
    return str(d.locate_file(listed[0])) if listed else ""


def _is_source(f) -> bool:
    parts = f.parts
    if any(p == "__pycache__" for p in parts) or f.suffix not in _SOURCE_SUFFIXES:
        return False
    if len(parts) > 1 and parts[-2].endswith(".dist-info"):  # metadata: only what registers code
        return f.name == "entry_points.txt"
    return True


def _stat(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


_FILE_DIGESTS: dict[str, tuple[tuple, str]] = {}  # path -> (stat, digest)


def file_digest(path: str) -> str:
    """sha256 of a file's bytes, memoized per process while its mtime, size and inode hold."""
    st = _stat(path)
    if st is None:
        return "<missing>"
    found = _FILE_DIGESTS.get(path)
    if found is not None and found[0] == st:
        return found[1]
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "<unreadable>"
    _FILE_DIGESTS[path] = (st, digest)
    return digest


def _editable_source(d: importlib.metadata.Distribution) -> Path | None:
    try:
        info = json.loads(d.read_text("direct_url.json") or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not (info.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(info.get("url", ""))
    if url.scheme != "file":
        return None
    root = Path(unquote(url.path))
    return root / "src" if (root / "src").is_dir() else root


def _tree_files(root: Path) -> list[Path]:
    """The source files under `root` (relative paths, sorted), without tests, caches and builds."""
    files = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(p in _SKIP_DIRS or p.startswith(".") or p.endswith(".egg-info") for p in rel.parts[:-1]):
            continue
        if path.suffix in _SOURCE_SUFFIXES and path.is_file():
            files.append(rel)
    return sorted(files)


def module_fingerprint(module: str) -> str:
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    return file_digest(path)[:16] if path else "0"


# ---------------------------------------------------------------- the capture stage's input


def source_digest(source, example_inputs) -> str | None:
    """Digest of what the capture stage takes, or None when it cannot be keyed (a model, not a graph)."""
    if isinstance(source, tuple(pipec_ir.types.DOCUMENT_KINDS.values())):
        return pipec_ir.digest(source)
    return graph_module_digest(source, example_inputs)


def graph_module_digest(gm, example_inputs) -> str | None:
    """A stable digest of an ATen fx GraphModule as the capture stage sees it.

    Every node of the graph as its code shows it (op, name, target, arguments),
    every example input's shape, stride, dtype, device (and for sizes, the
    symbolic expression), the placeholders' recorded values, the tensor constants
    (one-element constants are inlined into the IR, so their values count) and the
    symbolic-shape environment (ranges, example values, replacements, guards).
    None for anything else, or for a graph or input it cannot describe (a call
    of a submodule, a lambda, an unknown argument type): such a graph is not cached.
    """
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(gm, torch.fx.GraphModule):
        return None
    h = hashlib.sha256()

    def add(*parts) -> None:
        h.update(repr(parts).encode())
        h.update(b"\0")

    try:
        for node in gm.graph.nodes:
            if node.op == "call_module":  # what runs is the submodule's code, not in this graph
                return None
            add(node.op, node.name, describe_target(node.target), describe_arg(node.args),
                describe_arg(node.kwargs))
            if node.op == "placeholder":
                add("value", describe_value(node.meta.get("val")))
            elif node.op == "get_attr":
                d = describe_constant(gm, node.target)
                if d is None:
                    return None
                add("constant", d)
        for x in example_inputs:
            d = describe_value(x)
            if d is None:
                return None
            add("input", d)
        add("shape_env", describe_shape_env(find_shape_env(gm, example_inputs)))
    except Exception:  # noqa: BLE001 - a graph we cannot describe is simply not cached
        return None
    return h.hexdigest()


class _NotKeyable(Exception):
    pass


def describe_target(target) -> str:
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if type(target).__name__ in ("OpOverload", "OpOverloadPacket", "HigherOrderOperator"):
        return f"{type(target).__name__}:{target}"
    if not qualname or "<" in qualname:  # a lambda or a local function: not identified by its name
        raise _NotKeyable(repr(target))
    return f"{module}.{qualname}"


def describe_arg(a):
    """A node argument as nested tuples of strings (what the graph's code prints)."""
    torch = sys.modules["torch"]
    if isinstance(a, torch.fx.Node):
        return ("%", a.name)
    if isinstance(a, tuple | list):
        return (type(a).__name__, tuple(describe_arg(x) for x in a))
    if isinstance(a, dict):
        return ("dict", tuple((str(k), describe_arg(v)) for k, v in a.items()))
    if isinstance(a, slice):
        return ("slice", describe_arg(a.start), describe_arg(a.stop), describe_arg(a.step))
    if a is None or isinstance(a, bool | int | float | complex | str):
        return (type(a).__name__, repr(a))
    if isinstance(a, torch.dtype | torch.device | torch.layout | torch.memory_format):
        return (type(a).__name__, str(a))
    if isinstance(a, torch.SymInt | torch.SymFloat | torch.SymBool):
        return ("sym", str(a.node.expr))
    if type(a).__name__ in ("OpOverload", "OpOverloadPacket"):
        return ("op", str(a))
    raise _NotKeyable(type(a).__name__)


def describe_value(x):
    """A tuple of plain strings describing an example input, or None if it cannot be described."""
    torch = sys.modules["torch"]
    if x is None or isinstance(x, bool | int | float | str):
        return ("value", type(x).__name__, repr(x))
    if isinstance(x, torch.SymInt | torch.SymFloat | torch.SymBool):
        return ("sym", type(x).__name__, str(x.node.expr))
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            return None
        return ("tensor", tuple(str(s) for s in x.shape), tuple(str(s) for s in x.stride()),
                str(x.storage_offset()), str(x.dtype), x.device.type, bool(x.requires_grad))
    return None


_CONSTANT_DATA_LIMIT = 1 << 16  # elements; larger constants are bound at run time, never in the IR


def describe_constant(gm, target: str):
    torch = sys.modules["torch"]
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, torch.Tensor):
        return None
    meta = describe_value(obj)
    if meta is None:
        return None
    if isinstance(obj, torch._subclasses.FakeTensor) or obj.numel() > _CONSTANT_DATA_LIMIT:
        return meta
    # AOTAutograd calls the backend inside its fake mode, which refuses real tensors: without
    # leaving it every graph holding a constant (transformers' KV cache starts each layer with
    # torch.tensor([])) went uncached
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        data = obj.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        return meta + (hashlib.sha256(data.numpy().tobytes()).hexdigest(),)


def shape_env_state(source, example_inputs) -> tuple:
    """What a capture may add to its input's symbolic-shape environment (guards, replacements):
    compared before and after the stage, so that an entry that would lose them is not stored.
    Capture's own FX rewrites of the graph (folding tanh-GELU, moving gathers) are functions of
    the graph it was given, so they do not count."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(source, torch.fx.GraphModule):
        return ()
    return describe_shape_env(find_shape_env(source, example_inputs))


def find_shape_env(gm, example_inputs):
    torch = sys.modules["torch"]
    values = list(example_inputs) + [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    for x in values:
        if isinstance(x, torch.SymInt | torch.SymFloat | torch.SymBool):
            return getattr(x.node, "shape_env", None)
        env = getattr(getattr(x, "fake_mode", None), "shape_env", None)
        if env is not None:
            return env
    return None


def describe_shape_env(env) -> tuple:
    if env is None:
        return ()
    ranges = sorted((str(s), str(r.lower), str(r.upper)) for s, r in getattr(env, "var_to_range", {}).items())
    vals = getattr(env, "backed_var_to_val", None)
    if vals is None:
        vals = getattr(env, "var_to_val", {})
    hints = sorted((str(s), str(v)) for s, v in vals.items())
    replacements = sorted((str(k), str(v)) for k, v in getattr(env, "replacements", {}).items())
    guards = tuple(str(getattr(g, "expr", g)) for g in getattr(env, "guards", []))
    return (tuple(ranges), tuple(hints), tuple(replacements), guards)
