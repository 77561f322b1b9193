"""benchmarks/decode.py on the CPU: pipec's rows decode through transformers' own compile path
(`compile_config=CompileConfig(backend="pipec")`, a static cache) and give eager's tokens."""

import json
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import decode  # noqa: E402

import pytest
import torch


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


def test_record_parts_times_each_part_and_restores_the_methods():
    """record_parts.py (`decode.py --record-parts`): inside the `with`, each wrapped method's
    calls are timed under its name, nested ones too; afterwards the classes are as they were,
    including a method the class had only inherited."""
    import record_parts

    class Base:
        def inherited(self):
            return "base"

    class Graph(Base):
        def replay(self):
            return self.inherited()

    own = Graph.__dict__["replay"]
    events: list = []
    targets = [(Graph, "replay", "replay"), (Graph, "inherited", "inner")]
    with record_parts.timed_parts(events, targets):
        g = Graph()
        assert [g.replay() for _ in range(3)] == ["base"] * 3
    assert [name for name, _ in events] == ["inner", "replay"] * 3 and all(s >= 0 for _, s in events)
    assert Graph.__dict__["replay"] is own and "inherited" not in Graph.__dict__
    summary = record_parts.summarize(events, 0.002)
    assert summary["wall_ms"] == 2.0 and summary["parts"]["replay"]["calls"] == 3
    assert summary["replay_first_us"] >= 0 and "replay_median_us" in summary
    assert record_parts.line([summary]).startswith("wall 2.0 ms, inner ")

    module = types.ModuleType("fake_cuda")  # module functions too (`torch.cuda.synchronize`)
    module.synchronize = sync = lambda: None
    events.clear()
    with record_parts.timed_parts(events, [(module, "synchronize", "synchronize")]):
        module.synchronize()
    assert [name for name, _ in events] == ["synchronize"] and module.synchronize is sync


def test_record_parts_runs_its_before_call_untimed_ahead_of_each_call(monkeypatch):
    """`decode.py --record-parts`'s second measurement: each long generate after a one-token
    one, as the timed rounds alternate them; only the long one is timed."""
    import record_parts

    monkeypatch.setattr(record_parts.torch.cuda, "synchronize", lambda: None)  # the CPU machine
    order: list = []

    def call():
        order.append("call")
        torch.cuda.synchronize()  # a timed part inside the call

    parts = record_parts.record_parts(call, calls=2, before=lambda: order.append("before") or torch.cuda.synchronize())
    assert order == ["before", "call"] * 2 and len(parts) == 2
    assert all(p["parts"]["synchronize"]["calls"] == 1 for p in parts)  # the call's own, not before's


def test_cuda_only_options_are_refused_on_the_cpu(capsys):
    with pytest.raises(SystemExit):
        decode.main(["--device", "cpu", "--record-parts"])
    assert "need --device cuda" in capsys.readouterr().err


def test_decode_cache_moves_reports_each_generates_cache():
    """benchmarks/decode_cache_moves.py on the CPU: a row per generate, with the new static
    cache's addresses (keys, values and length per layer) compared with the last one's."""
    import decode_cache_moves

    rows = decode_cache_moves.main(["--case", "llama", "--backend", "pipec-ro", "--tiny"])
    assert [r["kind"] for r in rows] == list(decode_cache_moves.SEQUENCE)
    assert all(r["cache_addresses"] > 0 and r["cache_addresses"] % 3 == 0 for r in rows)
    assert all(0 <= r["same_as_last"] <= r["cache_addresses"] for r in rows)
    assert rows[0]["same_as_last"] == 0  # no generate before the first


def test_who_took_names_the_first_allocation_over_each_moved_address():
    """`--who`'s reading of the allocator's history (synthetic events: CUDA records the real ones)."""
    import decode_cache_moves

    frame = {"filename": "/x/transformers/activations.py", "line": 66, "name": "forward"}
    events = [{"action": "alloc", "addr": 0x1000, "size": 0x100, "stream": 0, "frames": []},
              {"action": "free_requested", "addr": 0x2000, "size": 0x400, "stream": 0},
              {"action": "alloc", "addr": 0x2000, "size": 0x400, "stream": 0, "frames": [frame]},
              {"action": "alloc", "addr": 0x2100, "size": 0x10, "stream": 0, "frames": []}]
    assert decode_cache_moves.first_allocation_over(0x2100, events) is events[2]
    assert decode_cache_moves.first_allocation_over(0x3000, events) is None
    lines = decode_cache_moves.who_took([0x2100, 0x5000, 0x3000], [0x9000, 0x5000, 0x4000], events)
    assert len(lines) == 2  # the address that stayed is not listed
    assert "1024 B at 0x2000" in lines[0] and "transformers/activations.py:66:forward" in lines[0]
    assert "nothing allocated over it" in lines[1]

