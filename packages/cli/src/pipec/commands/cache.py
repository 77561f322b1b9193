"""`pipec cache info` and `pipec cache clear`: the compile cache backend's own `info` and `clear`, and
pipec's entries in AOTAutograd's local cache (aot_cache.py)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

import pipec_ir

from ..exits import fail
from ..render import stdout
from .arguments import JsonOpt

cache_app = typer.Typer(name="cache", help="The compile cache: where it is and what it holds; clear it.",
                        no_args_is_help=True)
CacheNameOpt = Annotated[str, typer.Option(
    "--cache", envvar="PIPEC_CACHE", help="Which cache: local (PIPEC_CACHE_DIR) or redis (PIPEC_REDIS_URL).")]


def _cache_backend(name: str):
    """The registry entry of cache `name`; a usage error (exit 2) if there is none."""
    from ..plugins import get_registry

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
    aot = _aot_info()
    info["aot_autograd"] = aot
    kernels = info["kernels"] = _kernels_info()
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
    table.add_row("AOTAutograd's cache", f"{aot['entries']} entries of pipec's, {_fmt_bytes(aot['bytes'])} "
                                         f"({aot['location']})")
    table.add_row("kernel directory", f"{kernels['sources']} kernel sources, {kernels['stored_launches']} stored "
                                      f"launches, {_fmt_bytes(kernels['bytes'])} in all ({kernels['location']})")
    stdout.print(table, markup=False)


def _kernels_info() -> dict:
    """The runtime's kernel directory ($PIPEC_KERNEL_DIR, else its default): the generated kernels'
    sources, the launch store's records (cubins) and tuning results. Not part of the compile cache
    (`clear` leaves it); safe to delete while no pipec process runs."""
    from pathlib import Path

    from pipec_runtime_cudagraph.kernels import default_kernel_dir

    from ..pipeline import env_kernel_dir

    root = Path(env_kernel_dir() or default_kernel_dir())
    files = [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []
    return {"location": str(root), "sources": sum(p.suffix == ".py" and p.parent == root for p in files),
            "stored_launches": sum(p.suffix == ".cubin" and p.parent.name == "launches" for p in files),
            "bytes": sum(p.stat().st_size for p in files)}


def _aot_info() -> dict:
    """pipec's entries in AOTAutograd's local cache (README, "Compile cache")."""
    from ..aot_cache import aot_entries, torch_cache_dir

    found = aot_entries()
    return {"location": str(torch_cache_dir() / "aotautograd"), "entries": len(found),
            "bytes": sum(p.stat().st_size for p in found)}


@cache_app.command("clear")
def cache_clear_cmd(cache: CacheNameOpt = "local", json_out: JsonOpt = False) -> None:
    """Delete every entry of the compile cache (nothing else in its directory or Redis database), and
    pipec's entries in AOTAutograd's local cache."""
    from ..aot_cache import clear_aot_entries, torch_cache_dir

    entry = _cache_backend(cache)
    removed = _cache_call(entry, "clear")
    location = getattr(entry.impl, "location", entry.name)
    try:  # the graphs AOTAutograd's cache holds for pipec would still be served
        aot_removed = clear_aot_entries()
    except OSError as exc:
        fail(f"AOTAutograd's cache ({torch_cache_dir()}): {exc.strerror or exc}")
    if json_out:
        print(json.dumps({"backend": entry.name, "location": str(location), "removed": removed,
                          "aot_autograd_removed": aot_removed}, indent=2))
    else:
        stdout.print(f"cleared {removed} entries from the {entry.name} cache ({location}) and {aot_removed} of "
                     f"pipec's from AOTAutograd's cache ({torch_cache_dir() / 'aotautograd'})", markup=False)
