"""pipec's compiled graphs stored in AOTAutograd's own cache, and loaded back from it.

On a warm start in a new process, pipec's stages all hit the compile cache, yet AOTAutograd
still traces every graph again (functionalization, the joint graph, the partition): 5.7 s of
BERT base training's 10.5 s warm compile on the H200 (docs/performance.md, "Session 22").
Inductor skips that trace through AOTAutograd's cache; so does pipec now. The capture stage
asks AOTAutograd to look each graph up first (pipec_capture/aot_cache.py) under `cache_tag`;
the front end returns each compiled graph as a `CompiledGraph` (aot_entry.py, imported only
under torch.compile: it needs Inductor's OutputCode), which AOTAutograd pickles:

* the Program's JSON (what codegen made of the graph);
* the layers between AOTAutograd's call and the runtime's callable (graph_call.py), pickled
  with that callable left out (`pickle_layers`);
* the counts the graph's GraphStats had (ops, fusions, externs, kernels), so a graph served
  from this cache is reported as it was compiled, and its fallback warnings are given again.

On a hit, AOTAutograd hands the entry to `post_compile`, which calls the loader of the backend
running now (`loading`): the Program goes through the runtime stage alone (`compile_graph` of a
Program), and the layers are put back around it. AOTAutograd restores the graph's guards itself.

Off with `aot_cache=False` (`PIPEC_AOT_CACHE=0`) or pipec's compile cache off; for compiles
that read more than an entry holds (`pipec explain`, `dump_dir`, stage logs,
`pipec_stage_finished` observers); and, in the capture stage, without `early_compile` (a
backward compiled at its first call is stored by nobody).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import io
import json
import logging
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pipec_ir
from pipec_ir import CompileOptions

from .cache.keys import FRONT_END_OPTIONS, KEY_FORMAT, distribution_fingerprint, implementation_fingerprint
from .cache.store import resolve_cache_name
from .logs import logger, stage_logged
from .plugins import get_plugin_manager
from .session import STAGE_ORDER

OPTION = "aot_cache"  # on by default where pipec's compile cache is
TAG_OPTION = "aot_cache_tag"  # what the front end hands the capture stage

# the loader of the pipec backend compiling now: a CompiledGraph loaded from AOTAutograd's
# cache is rebuilt by the backend (its session, options and graph names) that looked it up
_LOADER: contextvars.ContextVar[Callable[[Any], Callable] | None] = \
    contextvars.ContextVar("pipec_aot_loader", default=None)


def cache_tag(options: CompileOptions, registry: pipec_ir.Registry,
              load_options: frozenset[str] = frozenset()) -> str | None:
    """The tag AOTAutograd's keys get for graphs compiled with `options`: a digest of pipec's
    code (every stage's implementation and the front end) and the options that change what the
    stages make. None where pipec's graphs must not come from AOTAutograd's cache (module
    docstring)."""
    if not options.get(OPTION, True) or resolve_cache_name(options.cache, registry) is None:
        return None
    if options.dump_dir or any(stage_logged(s) for s in STAGE_ORDER) \
            or get_plugin_manager().hook.pipec_stage_finished.get_hookimpls():
        return None
    parts: dict[str, Any] = {"format": KEY_FORMAT, "front_end": distribution_fingerprint("pipec"),
                             "options": options.key(exclude=(*load_options, *FRONT_END_OPTIONS))}
    for stage in STAGE_ORDER:
        try:
            entry = registry.entry(stage, getattr(options, stage))
        except pipec_ir.UnknownStageError:
            return None  # reported where the stage runs
        parts[stage] = [entry.name, entry.distribution, entry.version,
                        implementation_fingerprint(entry, torch=stage == "capture")]
    return "pipec-" + hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def in_cache_scope(tag: str) -> bool:
    """Whether the graph being compiled now went through AOTAutograd's cache under `tag` (the
    capture stage entered its cache_scope; a capture without one never does)."""
    import torch

    return tag in str(getattr(torch.compiler.config, "cache_key_tag", "")) and \
        bool(getattr(torch._functorch.config, "bundled_autograd_cache", False))


def lookup_bypasses() -> int:
    """How many lookups AOTAutograd's cache has passed over in this process (torch's counter)."""
    from torch._dynamo.utils import counters

    return counters["aot_autograd"]["autograd_cache_bypass"]


@contextlib.contextmanager
def loading(loader: Callable[[Any], Callable]):
    """While the block runs, graphs AOTAutograd finds in its cache are loaded by `loader`."""
    token = _LOADER.set(loader)
    try:
        yield
    finally:
        _LOADER.reset(token)


def current_loader() -> Callable[[Any], Callable] | None:
    """The loader of the pipec backend compiling now (`loading`), if any."""
    return _LOADER.get()


TORCH_CACHE_LOGGER = "torch._functorch._aot_autograd.autograd_cache"  # torch 2.11 and 2.13


class _Relay(logging.Handler):
    """torch's cache records, first line only, as pipec's `aot_cache` log lines for one graph."""

    def __init__(self, out: logging.Logger, graph: str) -> None:
        super().__init__(logging.INFO)
        self.out, self.graph = out, graph

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().strip().splitlines()
        if text and not text[0].startswith("Autograd graph cache hash details"):
            self.out.info("graph %s: %s", self.graph, text[0])


@contextlib.contextmanager
def cache_events_logged(graph: str):
    """With PIPEC_LOGS=aot_cache: what AOTAutograd's cache does with Dynamo graph `graph` while the
    block runs (hit, miss, entry written, passed over and why), read from torch's own records and
    logged by `pipec.aot_cache`. A graph the cache passes over says why only there."""
    out = logger("aot_cache")
    if not out.isEnabledFor(logging.INFO):
        yield
        return
    source = logging.getLogger(TORCH_CACHE_LOGGER)
    relay, level, propagate = _Relay(out, graph), source.level, source.propagate
    source.addHandler(relay)
    source.setLevel(logging.INFO)
    source.propagate = False  # said once, by pipec's line
    try:
        yield
    finally:
        source.removeHandler(relay)
        source.setLevel(level)
        source.propagate = propagate


class _RuntimeLeftOut(pickle.Pickler):
    def __init__(self, file, runtime) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.runtime = runtime

    def persistent_id(self, obj):
        return "runtime" if obj is self.runtime else None


class _RuntimePutBack(pickle.Unpickler):
    def __init__(self, file, runtime) -> None:
        super().__init__(file)
        self.runtime = runtime

    def persistent_load(self, pid):
        if pid != "runtime":
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return self.runtime


def pickle_layers(fn: Callable) -> bytes:
    """`fn` (layers around the runtime's callable, or that callable itself) pickled without the
    runtime's callable, which `unpickle_layers` puts back. AOTAutograd stores its entry while its
    fake mode is active: a CUDA constant's bytes would be copied to the host as a fake tensor
    (no data), so the tensors are pickled outside it."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    buffer = io.BytesIO()
    with unset_fake_temporarily():
        _RuntimeLeftOut(buffer, getattr(fn, "pipec_runtime", fn)).dump(fn)
    return buffer.getvalue()


def unpickle_layers(data: bytes, runtime: Callable) -> Callable:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return _RuntimePutBack(io.BytesIO(data), runtime).load()


# pipec's entries among AOTAutograd's: their pickles name the class that holds each graph
ENTRY_MARK = b"pipec.aot_entry"


def torch_cache_dir() -> Path:
    """Torch's cache directory (TORCHINDUCTOR_CACHE_DIR, else torch's default), not created."""
    import os

    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir())


def aot_entries(root: Path | None = None) -> list[Path]:
    """The entries of AOTAutograd's local cache (`<root>/aotautograd/<key>/<file>`) that hold
    pipec's graphs: `pipec cache info` counts them and `pipec cache clear` deletes them (they
    outlive pipec's own cache otherwise, and would still serve its graphs)."""
    found = []
    for path in sorted(((root or torch_cache_dir()) / "aotautograd").glob("*/*")):
        try:
            if path.is_file() and ENTRY_MARK in path.read_bytes():
                found.append(path)
        except OSError:  # written or deleted meanwhile
            continue
    return found


def clear_aot_entries(root: Path | None = None) -> int:
    """Delete pipec's entries from AOTAutograd's local cache (and the key folders left empty);
    how many went."""
    removed = 0
    for path in aot_entries(root):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed += 1
        with contextlib.suppress(OSError):  # another entry is still there
            path.parent.rmdir()
    return removed


def stats_snapshot(stats) -> dict:
    """What a graph's GraphStats counted that only its capture and fusion stages can tell."""
    return {"op_count": stats.op_count, "fusion_count": stats.fusion_count, "extern_ops": list(stats.extern_ops),
            "not_fused": list(stats.not_fused), "units": stats.units, "plan_key": stats.plan_key}


__all__ = ["ENTRY_MARK", "OPTION", "TAG_OPTION", "aot_entries", "cache_events_logged", "cache_tag", "clear_aot_entries",
           "current_loader", "in_cache_scope", "loading", "lookup_bypasses", "pickle_layers", "stats_snapshot",
           "torch_cache_dir", "unpickle_layers"]
