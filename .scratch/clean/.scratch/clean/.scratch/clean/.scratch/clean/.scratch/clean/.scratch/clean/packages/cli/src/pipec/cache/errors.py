"""The cache's error and warning."""

from __future__ import annotations

from ..errors import PipecError


class CacheError(PipecError):
    """The cache cannot be used (an unsafe directory, an unreachable server); the CLI exits 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, stage="cache")


class PipecCacheWarning(UserWarning):
    """A cache entry failed its check (deleted and recompiled), or a backend failed to read or write."""
