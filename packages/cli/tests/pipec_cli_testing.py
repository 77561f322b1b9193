"""Helpers shared by the pipec cli tests (a unique module name: the repo root tests have a conftest too)."""

import importlib.metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN_SRC = HERE.parents[2] / "tests" / "plugin_pkg" / "src"


def entry_point(name: str, value: str):
    return importlib.metadata.EntryPoint(name=name, value=value, group="pipec")
