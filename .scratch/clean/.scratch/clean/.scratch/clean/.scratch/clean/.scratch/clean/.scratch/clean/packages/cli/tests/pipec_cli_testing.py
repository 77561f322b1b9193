"""Helpers shared by the pipec cli tests (a unique module name: the repo root tests have a conftest too)."""

import importlib.metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN_SRC = HERE.parents[2] / "tests" / "plugin_pkg" / "src"


def entry_point(name: str, value: str):
    return importlib.metadata.EntryPoint(name=name, value=value, group="pipec")


def run(argv, capsys):
    """Run the `pipec` command in-process: (exit code, stdout, stderr)."""
    import pytest

    from pipec.cli import main

    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return info.value.code, out, err


def one_error_line(err: str) -> str:
    """stderr holds exactly one `error:` line (besides progress, notes and warnings), and no traceback."""
    lines = [ln for ln in err.splitlines() if ln.startswith("error")]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]
