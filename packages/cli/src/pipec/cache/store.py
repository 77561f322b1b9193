"""What the pipeline sees of a cache: documents in, documents out, every entry checked."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import pipec_ir

from .entry import BadEntry, pack_entry, unpack_entry
from .errors import PipecCacheWarning, as_cache_error

DEFAULT_BACKEND = "local"
DISABLED = "none"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class CompileCache:
    """A registered cache backend (pipec_ir.Cache: `get`/`put` of bytes) holding IR documents.

    `load` returns a stored document only if its entry passes the sha256 check
    and the document parses and verifies; a bad entry is deleted (when the backend
    can), named in one warning, and reported as a miss, so the stage recompiles
    and stores a good entry. A backend that fails to read or write costs a warning, never
    the compilation, except for a pipec_ir.CacheError (the cache cannot be used at all),
    raised again as pipec's CacheError.
    """

    name: str
    backend: object

    @property
    def location(self) -> str:
        return str(getattr(self.backend, "location", self.name))

    def load(self, key: str, kind: str):
        """(document, canonical JSON text) stored under `key`, or None."""
        text = self.load_text(key)
        if text is None:
            return None
        doc = self.parse(key, kind, text)
        return None if doc is None else (doc, text)

    def load_text(self, key: str) -> str | None:
        """The JSON text stored under `key`, its entry's sha256 checked but not parsed, or None.
        (The pipeline parses a document only where something reads it: `parse`.)"""
        try:
            data = self.backend.get(key)
        except pipec_ir.CacheError as exc:
            raise as_cache_error(exc) from None
        except Exception as exc:  # noqa: BLE001 - a broken backend never breaks a compilation
            self._warn(f"pipec: cache {self.name} failed to read entry {key[:16]}: {_one_line(exc)}")
            return None
        if data is None:
            return None
        try:
            return unpack_entry(key, data).decode("utf-8")
        except (BadEntry, UnicodeDecodeError) as exc:
            self._reject(key, str(exc) if isinstance(exc, BadEntry) else _one_line(exc))
            return None

    def parse(self, key: str, kind: str, text: str):
        """The `kind` document of `load_text(key)`'s text, parsed and verified, or None (the entry is
        deleted and named in a warning, as a damaged one)."""
        try:
            return pipec_ir.loads(text, kind=kind)  # verified too
        except pipec_ir.IRError as exc:
            self._reject(key, f"bad {kind} document: {_one_line(exc)}")
            return None

    def _reject(self, key: str, why: str) -> None:
        self._delete(key)
        self._warn(f"pipec: cache entry {key[:16]} in {self.name} ({self.location}) failed its check "
                   f"({why}); deleted it and recompiling")

    def store(self, key: str, text: str) -> None:
        try:
            self.backend.put(key, pack_entry(key, text.encode("utf-8")))
        except pipec_ir.CacheError as exc:
            raise as_cache_error(exc) from None
        except Exception as exc:  # noqa: BLE001
            self._warn(f"pipec: cache {self.name} failed to store entry {key[:16]}: {_one_line(exc)}")

    def _delete(self, key: str) -> None:
        delete = getattr(self.backend, "delete", None)
        if delete is None:
            return  # the fresh entry stored after recompiling replaces it
        try:
            delete(key)
        except Exception:  # noqa: BLE001
            pass

    @staticmethod
    def _warn(message: str) -> None:
        warnings.warn(message, PipecCacheWarning, stacklevel=4)


def resolve_cache_name(name: str | None, registry: pipec_ir.Registry) -> str | None:
    """The backend `CompileOptions.cache` selects: None -> "local" when registered; "none" -> off."""
    if name == DISABLED:
        return None
    if name is None:
        return DEFAULT_BACKEND if DEFAULT_BACKEND in registry.names("cache") else None
    return name


def open_cache(name: str | None, registry: pipec_ir.Registry) -> CompileCache | None:
    """The CompileCache for `CompileOptions.cache`, or None when caching is off.

    An unknown name raises pipec_ir.UnknownStageError (listing the registered ones).
    """
    resolved = resolve_cache_name(name, registry)
    if resolved is None:
        return None
    return CompileCache(resolved, registry.get("cache", resolved))


def device_checks_dir(name: str | None, registry: pipec_ir.Registry) -> str | None:
    """Where the capture stage keeps its verdicts on the device's libraries across processes
    (`checks` in the directory of a cache that has one, the local cache), or None: another cache,
    caching off, or a directory that fails the cache's own privacy check."""
    resolved = resolve_cache_name(name, registry)
    if resolved is None:
        return None
    try:
        backend = registry.get("cache", resolved)
        check = getattr(backend, "check", None)
        directory = check() if callable(check) and hasattr(backend, "directory") else None
    except Exception:  # noqa: BLE001 - an unknown or unusable cache is reported where it is opened
        return None
    return None if directory is None else str(Path(directory) / "checks")


def check_cache(name: str | None, registry: pipec_ir.Registry) -> str | None:
    """Make sure the selected cache is usable now (CacheError if not); returns its location."""
    cache = open_cache(name, registry)
    if cache is None:
        return None
    check = getattr(cache.backend, "check", None)
    if check is not None:
        try:
            check()
        except pipec_ir.CacheError as exc:
            raise as_cache_error(exc) from None
    return cache.location
