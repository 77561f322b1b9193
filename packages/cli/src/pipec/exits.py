"""How a `pipec` command ends badly: one line on stderr and an exit code (0 success; 1 compile
failure or numerical mismatch vs eager; 2 usage error), and warnings shown as one line."""

from __future__ import annotations

import sys
import warnings
from typing import NoReturn

import typer

from .errors import PipecPluginWarning


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr, then exit with `code` (2 usage, 1 compile/numerical failure)."""
    line = " ".join(str(message).split("\n")[0].split()) or "failed"
    print(f"error: {line}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


def one_line(exc: BaseException) -> str:
    inner = getattr(exc, "inner_exception", None)
    if isinstance(inner, BaseException):  # Dynamo's BackendCompilerFailed: "backend='x' raised:", then it
        return one_line(inner)
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    # Dynamo's errors say what failed on a later line ("RuntimeError when making fake tensor call",
    # then "Explanation: ... got RuntimeError('...')")
    explained = next((ln.removeprefix("Explanation:").strip() for ln in lines[1:] if ln.startswith("Explanation:")), None)
    return f"{type(exc).__name__}: {lines[0]}" + (f" ({explained})" if explained else "")


def _show_warning(message, category, filename, lineno, file=None, line=None):
    text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
    print(f"warning: {text}", file=sys.stderr, flush=True)


def setup_warnings() -> None:
    warnings.showwarning = _show_warning
    warnings.simplefilter("always", PipecPluginWarning)


__all__ = ["fail", "one_line", "setup_warnings"]
