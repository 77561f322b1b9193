"""The README's transformers example: `pipec compile examples/transformers/gpt2.py` (GPT-2 with
its KV cache, whose graphs hold tensor constants) compiles, runs and matches eager."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("transformers")


def test_pipec_compile_transformers_gpt2():
    path = ROOT / "examples" / "transformers" / "gpt2.py"
    r = subprocess.run([sys.executable, "-m", "pipec", "compile", str(path), "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    assert report["kernel_count"] > 0 and report["fusion_count"] > 0
    assert report["max_error"] < 1e-4
