"""The cache's error and warning."""

from __future__ import annotations

import pipec_ir

from ..errors import PipecError


class CacheError(PipecError, pipec_ir.CacheError):
    """The cache cannot be used (an unsafe directory, an unreachable server); the CLI exits 2.

    Backends raise `pipec_ir.CacheError` (a plugin needs only pipec_ir); pipec turns one into
    this `PipecError` where it calls the backend (`as_cache_error`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, stage="cache")


def as_cache_error(exc: pipec_ir.CacheError) -> CacheError:
    """A backend's `pipec_ir.CacheError` as pipec's CacheError (the same object when it already is one)."""
    if isinstance(exc, CacheError):
        return exc
    error = CacheError(str(exc))
    error.__cause__ = exc
    return error


class PipecCacheWarning(UserWarning):
    """A cache entry failed its check (deleted and recompiled), or a backend failed to read or write."""
