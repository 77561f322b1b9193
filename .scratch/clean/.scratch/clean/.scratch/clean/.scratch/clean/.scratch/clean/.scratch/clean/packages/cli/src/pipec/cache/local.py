"""`local`: the default cache backend, one file per entry in a private per-user directory.

The directory is `PIPEC_CACHE_DIR`, else `pipec/compile` under the platform's
user cache directory (`~/.cache/pipec/compile` on Linux, honouring
XDG_CACHE_HOME). pipec creates it with mode 0o700 and refuses to use a
directory that group or others can write to, or that another user owns: anyone
who can write there could make pipec run code of their choosing. Entries are
written atomically (a temporary file in the same directory, then os.replace),
so a reader sees a whole entry or none.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

from pipec_runtime_cudagraph.files import atomic_write

from .errors import CacheError

CACHE_DIR_ENV = "PIPEC_CACHE_DIR"
_KEY = re.compile(r"[0-9a-f]{16,128}")
_SUFFIX = ".entry"


def default_cache_dir() -> Path:
    """`pipec/compile` under the platform's per-user cache directory."""
    home = Path.home()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
        return base / "pipec" / "Cache" / "compile"
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "pipec" / "compile"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else home / ".cache"
    return base / "pipec" / "compile"


def check_private_dir(path: Path) -> None:
    """Refuse a cache directory that is not a directory, not ours, or writable by group/others."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise CacheError(f"cache directory {path} is not usable: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError(f"cache directory {path} is not a directory; set {CACHE_DIR_ENV} to a private directory")
    if sys.platform == "win32":
        return
    if st.st_uid != os.getuid():
        raise CacheError(f"cache directory {path} is owned by uid {st.st_uid}, not by this user "
                         f"(uid {os.getuid()}); pipec refuses to use it: set {CACHE_DIR_ENV} to a directory "
                         "of your own, or compile with --no-cache")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheError(f"cache directory {path} is writable by group or others (mode "
                         f"{stat.S_IMODE(st.st_mode):04o}); pipec refuses to use it: run `chmod 700 {path}` "
                         f"or set {CACHE_DIR_ENV} to a private directory")


def _make_private_dir(path: Path) -> None:
    if path.is_dir():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        return  # another process made it meanwhile (checked by the caller)
    except OSError as exc:
        raise CacheError(f"cannot create cache directory {path}: {exc.strerror or exc}; "
                         f"set {CACHE_DIR_ENV} to a writable directory, or compile with --no-cache") from None
    os.chmod(path, 0o700)  # whatever the umask


class LocalCache:
    """Entries as files `<dir>/<key[:2]>/<key>.entry` (see the module docstring)."""

    name = "local"

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self._directory = Path(directory) if directory is not None else None

    @property
    def directory(self) -> Path:
        """The configured directory: the constructor's, else $PIPEC_CACHE_DIR, else the platform default."""
        if self._directory is not None:
            return self._directory
        env = os.environ.get(CACHE_DIR_ENV)
        return Path(env).expanduser() if env else default_cache_dir()

    @property
    def location(self) -> str:
        return str(self.directory)

    def check(self) -> Path:
        """Create the directory if needed and check that it is private; returns it."""
        path = self.directory
        _make_private_dir(path)
        check_private_dir(path)
        return path

    def _file(self, root: Path, key: str) -> Path:
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(f"bad cache key {key!r} (expected lowercase hex)")
        return root / key[:2] / (key + _SUFFIX)

    # ------------------------------------------------------------ the Cache protocol

    def get(self, key: str) -> bytes | None:
        path = self._file(self.check(), key)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes) -> None:
        path = self._file(self.check(), key)
        if not path.parent.is_dir():
            try:
                os.mkdir(path.parent, 0o700)
            except FileExistsError:
                pass
        atomic_write(path, data, prefix=".tmp-", suffix=_SUFFIX)

    # ------------------------------------------------------------ extras (pipec cache info / clear)

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._file(self.check(), key))
        except FileNotFoundError:
            pass

    def _entries(self, root: Path):
        if not root.is_dir():
            return
        for sub in sorted(root.iterdir()):
            if len(sub.name) == 2 and sub.is_dir() and not sub.is_symlink():
                for f in sorted(sub.iterdir()):
                    if f.name.endswith(_SUFFIX) and f.is_file():
                        yield f

    def info(self) -> dict:
        root = self.check()
        entries = [f for f in self._entries(root) if not f.name.startswith(".")]
        return {"backend": self.name, "location": str(root), "entries": len(entries),
                "bytes": sum(f.stat().st_size for f in entries)}

    def clear(self) -> int:
        """Delete every entry (and leftover temporary file); other files are left alone."""
        root = self.check()
        removed = 0
        for f in list(self._entries(root)):
            f.unlink(missing_ok=True)
            removed += not f.name.startswith(".")
        for sub in root.iterdir():
            if len(sub.name) == 2 and sub.is_dir() and not sub.is_symlink():
                try:
                    sub.rmdir()
                except OSError:
                    pass  # not empty: something else lives there
        return removed
