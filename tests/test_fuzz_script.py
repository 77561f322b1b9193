"""scripts/fuzz.py itself: a long run's options (--keep-going, --seconds), with the check stubbed."""

import importlib.util
import json
import sys
from pathlib import Path

import fuzz_pipeline

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "fuzz.py"


def _script():
    spec = importlib.util.spec_from_file_location("pipec_fuzz_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(monkeypatch, tmp_path, *args):
    calls = []

    def check(prog, device="cpu", bounds_check=False):
        calls.append(prog)
        if len(calls) % 2 == 0:
            raise AssertionError(f"planted failure {len(calls)}")

    monkeypatch.setattr(fuzz_pipeline, "check_program", check)
    summary = tmp_path / "summary.json"
    monkeypatch.setattr(sys, "argv", ["fuzz.py", "--family", "classic", "--summary", str(summary), *args])
    status = _script().main()
    return status, calls, json.loads(summary.read_text())


def test_keep_going_records_every_failure_and_goes_on(monkeypatch, tmp_path, capsys):
    status, calls, data = _run(monkeypatch, tmp_path, "--count", "6", "--keep-going")
    assert status == 1 and len(calls) >= 4
    assert data["graphs"] == len(calls) and data["mismatches"] == len(calls) // 2
    assert [f["error"] for f in data["failures"]] == [f"AssertionError: planted failure {k}"
                                                       for k in range(2, len(calls) + 1, 2)]
    err = capsys.readouterr().err
    assert f"{len(calls) // 2} of {len(calls)} graphs failed" in err
    assert ", in check\n" in err  # each failure with the frames it was raised from


def test_without_keep_going_the_first_failure_stops_the_run(monkeypatch, tmp_path):
    status, calls, data = _run(monkeypatch, tmp_path, "--count", "6")
    assert status == 1 and data["mismatches"] == 1 and data["failures"] is None
    assert data["first_failure"] is not None


def test_seconds_stops_drawing(monkeypatch, tmp_path):
    """Past --seconds the run ends at once: hypothesis is not left drawing up to --count programs
    (a large run under `timeout` was killed that way before it wrote its summary)."""
    import time

    start = time.perf_counter()
    status, calls, data = _run(monkeypatch, tmp_path, "--count", "100000", "--keep-going", "--seconds", "0")
    assert status == 0 and calls == [] and data["graphs"] == 0 and data["stopped_by_time_limit"]
    assert time.perf_counter() - start < 60  # 100,000 draws would take many minutes
