"""benchmarks/decode.py on the CPU: pipec's rows decode through transformers' own compile path
(`compile_config=CompileConfig(backend="pipec")`, a static cache) and give eager's tokens."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import decode  # noqa: E402


import pytest


@pytest.mark.parametrize("reuse", [False, True], ids=["cache_per_generate", "reused_cache"])
def test_pipec_decodes_eagers_tokens_through_generates_compile(tmp_path, reuse):
    out = tmp_path / "decode.json"
    rc = decode.main(["--cases", "llama", "--tiny", "--device", "cpu", "--backends", "eager,pipec,pipec-ro",
                      "--new-tokens", "3", "--rounds", "1", "--out", str(out)] + (["--reuse-cache"] if reuse else []))
    assert rc == 0
    (record,) = json.loads(out.read_text())["cases"]
    for name in ("pipec", "pipec-ro"):
        row = record["rows"][name]
        assert row["tokens_equal"] and row["max_score_error"] < 1e-4, row
        assert row["graphs"] == 1 and row["step_ms"] > 0  # the decoding step is one graph, compiled once
    assert "| llama | float32 | 1 x 8 + 3 |" in out.with_suffix(".md").read_text()


def test_backends_must_start_with_eager(capsys):
    with pytest.raises(SystemExit):
        decode.main(["--backends", "pipec,eager"])
    assert "eager first" in capsys.readouterr().err
