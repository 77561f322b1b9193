"""scripts/learn_tuning_table.py: the shipped tuning table learned from tuning-cache files, keeping
only decisions one candidate won (within 5%) in every run; and the option that turns the table off."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

import pipec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import learn_tuning_table  # noqa: E402

from pipec_runtime_cudagraph.tuning_table import FORMAT, TuningTable, feature_key  # noqa: E402

LABELS = ["BLOCK=64 warps=4 stages=1", "BLOCK=128 warps=4 stages=1"]


def features(n: int) -> dict:
    return {"kind": "launch", "configs": LABELS, "sizes": [n], "dtypes": ["float32"] * 3}


def write(folder: Path, name: str, n: int, times, family: str = "sm90", **more) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"chosen": min(range(len(times)), key=lambda i: math.inf if times[i] is None else times[i]),
            "times_ms": times, "family": family, "features": features(n), "labels": LABELS, **more}
    (folder / f"{name}.json").write_text(json.dumps(data))


def test_decide_keeps_only_a_pick_within_the_margin_everywhere():
    a, b = LABELS
    assert learn_tuning_table.decide([{a: 1.0, b: 2.0}]) == (a, 1.0)
    assert learn_tuning_table.decide([{a: 1.0, b: 1.02}, {a: 1.1, b: 1.0}]) == (b, 1.02)  # never 5% off
    assert learn_tuning_table.decide([{a: 1.0, b: 1.5}, {a: 1.5, b: 1.0}]) is None  # the runs disagree
    assert learn_tuning_table.decide([{a: math.inf, b: 1.0}, {a: 1.0, b: 1.04}]) == (b, 1.04)  # a failed once
    assert learn_tuning_table.decide([{a: math.inf, b: math.inf}]) is None


def test_noisy_samples_of_one_body_are_decided_by_their_median():
    """The same kernel in every layer, timed once per layer: most samples agree, a few are slowed
    by noise (session 6's BERT backward row kernels: one config 27.6-28.6 us in five layers, 84-98 us in two)."""
    a, b = LABELS
    quiet = [{a: 1.0, b: 1.3}] * 4
    noisy = quiet + [{a: 2.0, b: 1.35}]
    assert learn_tuning_table.decide(noisy) is None  # b won one sample by far
    assert learn_tuning_table.decide_noisy(noisy) == (a, 1.0)
    assert learn_tuning_table.decide_noisy(noisy[1:]) is None  # too few samples
    split = [{a: 1.0, b: 1.3}] * 3 + [{a: 1.3, b: 1.0}] * 3  # half and half: no median within 5%
    assert learn_tuning_table.decide_noisy(split) is None
    faster_once = [{a: 1.0, b: 1.02}] * 5 + [{a: 1.0, b: 0.5}]  # b's best time is far below a's: not noise
    assert learn_tuning_table.decide_noisy(faster_once) == (b, 1.02)
    failed = [{a: 1.0, b: 1.3}] * 5 + [{a: math.inf, b: 1.3}]  # a pick that failed once is never trusted
    assert learn_tuning_table.decide_noisy(failed) is None


def test_the_median_rule_learns_refined_keys_only(tmp_path, capsys):
    """Noisy samples under one body get the median's pick; the coarse key, where bodies may
    differ, keeps the every-sample rule (here: left to timing)."""
    body = [["load", 2], ["sum", 1]]
    tuning = tmp_path / "run" / "tuning"
    for k, times in enumerate([[1.0, 1.3]] * 5 + [[2.0, 1.35]]):
        write(tuning, f"k{k}", 128, times, features=dict(features(128), body=body))
    out = tmp_path / "sm90.json"
    assert learn_tuning_table.main([str(tmp_path / "run"), "--family", "sm90", "--out", str(out)]) == 0
    assert "1 decided by the median" in capsys.readouterr().err
    table = TuningTable.for_family("sm90", tmp_path)
    assert table.pick(dict(features(128), body=body)) == LABELS[0]
    assert table.pick(dict(features(128), body=[["load", 9]])) is None
    entry = json.loads(out.read_text())["entries"][feature_key(dict(features(128), body=body))]
    assert entry == {"pick": LABELS[0], "samples": 6, "median_ratio": 1.0}


def test_kernels_told_apart_by_their_bodies_each_get_their_pick(tmp_path, capsys):
    """Launches with the same configs, sizes and dtypes but different bodies (the backward row
    kernels of one model) disagree about the fastest: each body gets its own entry, the coarse
    features none; where the bodies agree the coarse features get the pick too."""
    body_a, body_b = [["load", 2], ["sum", 1]], [["load", 4], ["sum", 2], ["where", 1]]
    tuning = tmp_path / "run" / "tuning"
    for k, (n, body, times) in enumerate([(128, body_a, [1.0, 0.5]), (128, body_b, [0.5, 1.0]),
                                          (256, body_a, [1.0, 0.5]), (256, body_b, [1.0, 0.6])]):
        write(tuning, f"k{k}", n, times, features=dict(features(n), body=body))
    out = tmp_path / "sm90.json"
    assert learn_tuning_table.main([str(tmp_path / "run"), "--family", "sm90", "--out", str(out)]) == 0
    table = TuningTable.for_family("sm90", tmp_path)
    assert table.pick(dict(features(128), body=body_a)) == LABELS[1]
    assert table.pick(dict(features(128), body=body_b)) == LABELS[0]
    assert table.pick(dict(features(128), body=[["load", 9]])) is None  # the bodies disagreed: timed
    assert table.pick(dict(features(256), body=[["load", 9]])) == LABELS[1]  # they agreed: the coarse pick
    assert "5 entries" in capsys.readouterr().err  # 4 refined, 1 coarse


def test_choice_groups_told_apart_by_their_exact_shapes_each_get_their_pick(tmp_path, capsys):
    """A GEMM choice group at two sizes of one power of two (BERT base's and BERT-large's FFN
    products): where they disagree each size keeps its own pick and the rounded key is left
    to timing; a third size of that power of two is then timed, not given either pick."""
    labels = ["library", "pingpong"]

    def choice(exact):
        return {"kind": "choice", "timer": "events", "alternatives": {"library": [], "pingpong": []},
                "exact": [exact]}
    tuning = tmp_path / "run" / "tuning"
    for k, (exact, times) in enumerate([("bfloat16[4096, 3072]", [0.95, 1.0]), ("bfloat16[4096, 4096]", [1.0, 0.8])]):
        write(tuning, f"c{k}", 0, times, features=choice(exact), labels=labels)
    out = tmp_path / "sm90.json"
    assert learn_tuning_table.main([str(tmp_path / "run"), "--family", "sm90", "--out", str(out)]) == 0
    table = TuningTable.for_family("sm90", tmp_path)
    assert table.pick(choice("bfloat16[4096, 3072]")) == "library"
    assert table.pick(choice("bfloat16[4096, 4096]")) == "pingpong"
    assert table.pick(choice("bfloat16[4096, 3584]")) is None
    assert "2 entries" in capsys.readouterr().err


def test_learns_a_table_the_runtime_reads(tmp_path, capsys):
    run1, run2 = tmp_path / "run1" / "tuning", tmp_path / "run2" / "tuning"
    write(run1, "k1", 128, [1.0, 0.5])  # BLOCK=128 wins twice: learned
    write(run2, "k1", 128, [1.0, 0.6])
    write(run1, "k2", 256, [1.0, 0.5])  # the runs disagree: left to timing
    write(run2, "k2", 256, [0.5, 1.0])
    write(run1, "k3", 512, [0.5, 1.0], family="sm80")  # another GPU family: not this table's
    (run1 / "old.json").write_text(json.dumps({"chosen": 0, "times_ms": [1.0, 2.0]}))  # no features: skipped
    out = tmp_path / "sm90.json"
    assert learn_tuning_table.main([str(tmp_path / "run1"), str(run2), "--family", "sm90", "--out", str(out)]) == 0
    assert "1 entries" in capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["format"] == FORMAT and data["family"] == "sm90"
    assert data["entries"] == {feature_key(features(128)): {"pick": LABELS[1], "samples": 2, "worst_ratio": 1.0}}
    table = TuningTable.for_family("sm90", tmp_path)
    assert table.pick(features(128)) == LABELS[1] and table.pick(features(256)) is None

    # --merge keeps what these samples do not contradict, and replaces what they decide again
    run3 = tmp_path / "run3"
    write(run3, "k4", 1024, [0.5, 1.0])
    assert learn_tuning_table.main([str(run3), "--family", "sm90", "--out", str(out), "--merge"]) == 0
    table = TuningTable.for_family("sm90", tmp_path)
    assert table.pick(features(128)) == LABELS[1] and table.pick(features(1024)) == LABELS[0]


def test_the_shipped_tables_parse():
    from pipec_runtime_cudagraph.tuning_table import TABLE_DIR

    for path in TABLE_DIR.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["format"] == FORMAT and data["family"] == path.stem
        assert len(TuningTable.for_family(path.stem)) == len(data["entries"]) > 0


def test_the_option_is_a_bool():
    with pytest.raises(ValueError, match="tuning_table must be True or False"):
        pipec.compile(lambda x: x + 1, tuning_table="no")


def test_the_environment_turns_the_table_off(monkeypatch):
    from pipec.options import make_options

    assert make_options().get("tuning_table", True) is True
    monkeypatch.setenv("PIPEC_TUNING_TABLE", "0")
    assert make_options().get("tuning_table") is False
    assert make_options(tuning_table=True).get("tuning_table") is True  # a compile's own option wins


def test_a_choice_group_the_table_knows_is_not_timed(monkeypatch, tmp_path):
    """A Linear + GELU's choice group (template, library, library_mm) is described by its
    alternatives' steps and shapes rounded up to powers of two; the table's pick is taken without
    running or timing any alternative, and counted in the compile profile."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    import pipec_ir
    from pipec.pipeline import compile_graph
    from pipec_capture import core_decompositions
    from pipec_runtime_cudagraph import choices, tuning_table
    from pipec_runtime_cudagraph.choices import ChoiceStep

    def f(x, w, b):
        return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))

    xs = [torch.randn(32, 64), torch.randn(48, 64), torch.randn(48)]
    gm = make_fx(f, decomposition_table=core_decompositions(), tracing_mode="fake")(*xs)
    run = compile_graph(gm, xs, pipec_ir.CompileOptions(cache="none"))
    monkeypatch.setattr(run, "tuning_cache", None)  # no pick of the user's tuning cache answers first
    (step,) = [s for s, _ in run.plans["cpu"] if isinstance(s, ChoiceStep)]
    features = tuning_table.choice_features(run, step.alternatives, (), "wall")
    assert sorted(features["alternatives"]) == ["library", "library_mm", "template"]
    assert ["extern", "aten.mm.default", ["float32[32, 64]", "float32[64, 64]", "float32[32, 64]"]] \
        in features["alternatives"]["library_mm"]  # N = 48 rounded up to 64

    (tmp_path / "sm90.json").write_text(json.dumps(
        {"format": FORMAT, "entries": {feature_key(features): {"pick": "library_mm"}}}))
    monkeypatch.setattr(tuning_table, "gpu_family", lambda device: "sm90")
    monkeypatch.setattr(tuning_table, "TABLE_DIR", tmp_path)
    monkeypatch.setattr(choices, "_timed", lambda runs, graphed: pytest.fail("timed"))
    monkeypatch.setattr(ChoiceStep, "_time_alternatives", lambda *a: pytest.fail("timed"))
    vals = [None] * run.nvals
    assert step._measure(vals, (), torch.device("cpu"), ()) == "library_mm"


def test_a_choice_pick_that_does_not_run_here_is_timed_instead(monkeypatch, tmp_path):
    """The table's alternative fails to run (a kernel that needs more resources than this GPU
    gives it): the group times its alternatives, as without a table, and runs the winner."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    import pipec_ir
    from pipec.pipeline import compile_graph
    from pipec_capture import core_decompositions
    from pipec_runtime_cudagraph import tuning_table
    from pipec_runtime_cudagraph.choices import ChoiceStep

    def f(x, w, b):
        return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))

    xs = [torch.randn(32, 64), torch.randn(48, 64), torch.randn(48)]
    gm = make_fx(f, decomposition_table=core_decompositions(), tracing_mode="fake")(*xs)
    run = compile_graph(gm, xs, pipec_ir.CompileOptions(cache="none"))
    monkeypatch.setattr(run, "tuning_cache", None)  # nothing written to the user's tuning cache
    (step,) = [s for s, _ in run.plans["cpu"] if isinstance(s, ChoiceStep)]
    features = tuning_table.choice_features(run, step.alternatives, (), "wall")
    (tmp_path / "sm90.json").write_text(json.dumps(
        {"format": FORMAT, "entries": {feature_key(features): {"pick": "library_mm"}}}))
    monkeypatch.setattr(tuning_table, "gpu_family", lambda device: "sm90")
    monkeypatch.setattr(tuning_table, "TABLE_DIR", tmp_path)

    ran = []

    def broken(vals, symvals, device):
        raise RuntimeError("out of resource: shared memory")

    # stand-ins for the alternatives' steps: the table's pick fails, the others record their run
    step.alternatives["library_mm"] = [broken]
    step.alternatives["template"] = [lambda vals, symvals, device: ran.append("template")]
    step.alternatives["library"] = [lambda vals, symvals, device: ran.append("library")]
    timed = []

    def time_alternatives(self, vals, symvals, device, bucket, timer):
        timed.append(bucket)
        self.timings[bucket] = {"template": 1.0, "library": 2.0, "library_mm": float("inf")}
        return "template"

    monkeypatch.setattr(ChoiceStep, "_time_alternatives", time_alternatives)
    monkeypatch.setattr(step, "tune", True)
    step([None] * run.nvals, (), torch.device("cuda"))  # picks are made for CUDA only; nothing here needs one
    assert timed == [()] and step.chosen == {(): "template"} and ran == ["template"]


def test_old_timings_get_their_kernels_bodies(tmp_path):
    """scripts/add_kernel_bodies.py finds the kernel of a timing written before the body feature
    by its tuning key, and adds the body; a timing of no saved kernel is copied as it is."""
    import add_kernel_bodies
    from pipec_ir import TritonKernel
    from pipec_runtime_cudagraph.kernels import body_digest
    from pipec_runtime_cudagraph.tuning_cache import tuning_key
    from pipec_runtime_cudagraph.tuning_table import body_features

    source = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k0(x, y, n, BLOCK: tl.constexpr):\n"
              "    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
              "    tl.store(y + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)\n")
    kernel_dir = tmp_path / "kernels"
    (kernel_dir / "tuning").mkdir(parents=True)
    (kernel_dir / "0123.py").write_text(source)
    configs = tuple(add_kernel_bodies.parse_config(label) for label in LABELS)
    key = tuning_key(body_digest(TritonKernel("k0", source, (), (), (), configs)), (), "GPU", "3.6.0")
    for name in (key, "unknown"):
        write(kernel_dir / "tuning", name, 128, [1.0, 0.5])
    assert add_kernel_bodies.main([str(kernel_dir), str(tmp_path / "out"), "--device", "GPU", "--triton", "3.6.0"]) == 0
    found = json.loads((tmp_path / "out" / "tuning" / f"{key}.json").read_text())["features"]
    assert found == dict(features(128), body=body_features(source)) and ["load", 1] in found["body"]
    assert "body" not in json.loads((tmp_path / "out" / "tuning" / "unknown.json").read_text())["features"]


def test_suite_tuning_samples_reads_the_times_a_suite_run_logged(tmp_path):
    """scripts/suite_tuning_samples.py: a real-model suite row's `pipec.tuning` lines, as
    pipec.bench records them, give each timed kernel's times by its name without the number."""
    import suite_tuning_samples

    results = tmp_path / "suite.json"
    results.write_text(json.dumps({"cases": [{"case": "bert", "rows": {"pipec": {"tuning": [
        "graph: compiling 292 kernel configs of 42 launches at once",
        "pipec_fused_add_sum_30: config 1 of 3 (XBLOCK=4 RBLOCK=1024 warps=4 stages=1), 0.0098 ms; all: 0.0119 0.0098 0.0124",
        "choice pipec_mm_3: cublas from the tuning table",
    ]}}}]}))
    assert suite_tuning_samples.logged_times(results, "bert") == {"pipec_fused_add_sum": [0.0119, 0.0098, 0.0124]}
    with pytest.raises(SystemExit, match="no case 'gpt2'"):
        suite_tuning_samples.logged_times(results, "gpt2")
