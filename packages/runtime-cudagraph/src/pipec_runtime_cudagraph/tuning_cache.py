"""Autotuning results on disk, so a second process (or a second compile of the same model)
does not time the same kernel again.

One small JSON file per (kernel body digest, size bucket, device name, Triton version) under
``<kernel cache>/tuning/`` (the kernel cache directory is per user, 0o700; see kernels.py).
A file holds the index of the fastest config and the measured times, and the decision's
features with the candidates' names (what the shipped tuning table is learned from). A file that cannot be
read, does not parse or names a config the kernel does not have is ignored (and rewritten
after the next timing): the cache can only save time, never change a result.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .files import atomic_write
from .kernels import kernel_cache_dir


def tuning_key(body_digest: str, bucket: tuple, device_name: str, triton_version: str) -> str:
    text = json.dumps([body_digest, [int(b) for b in bucket], device_name, triton_version])
    return hashlib.sha256(text.encode()).hexdigest()


class TuningCache:
    def __init__(self, kernel_dir: str | os.PathLike | None = None):
        self.directory = Path(kernel_cache_dir(kernel_dir)) / "tuning"

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str, n_configs: int) -> int | None:
        """The stored choice, or None (missing, unreadable, or out of range)."""
        try:
            data = json.loads(self._path(key).read_text())
            chosen = data["chosen"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if isinstance(chosen, int) and not isinstance(chosen, bool) and 0 <= chosen < n_configs:
            return chosen
        return None

    def times(self, key: str) -> list[float | None] | None:
        """The stored times (ms; None for a candidate that failed), or None."""
        try:
            times = json.loads(self._path(key).read_text())["times_ms"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return times if isinstance(times, list) else None

    def put(self, key: str, chosen: int, times_ms: list[float], learn: dict | None = None) -> None:
        """Store a choice; a directory that cannot be written only costs the next process a re-time.
        `learn` ({"family", "features", "labels": the candidates' names in `times_ms`' order}) is
        what `scripts/learn_tuning_table.py` learns the shipped tuning table from (tuning_table.py)."""
        data = {"chosen": chosen, "times_ms": [t if t != float("inf") else None for t in times_ms], **(learn or {})}
        try:
            self.directory.mkdir(mode=0o700, exist_ok=True)
            atomic_write(self._path(key), (json.dumps(data) + "\n").encode())
        except OSError:
            pass


__all__ = ["TuningCache", "tuning_key"]
