"""The real-model suite on the CPU: every tiny transformers model of hf_models.py through pipec,
checked against eager (float32, fixed seeds, kernels in Triton's interpreter).

* inference: `pipec.compile(model)` under no_grad, each model as one graph (no graph break);
  a couple also through `torch.compile(model, backend="pipec")`;
* export: a few through `pipec.export`, run from the artifact file;
* training: one forward and backward of the architectures with a training step, comparing
  the loss, every parameter's gradient and the buffers (BatchNorm's running statistics).

The real sizes run on the GPU: benchmarks/real_models.py.
"""

import copy

import pytest
import torch

import hf_models
import pipec

THROUGH_TORCH_COMPILE = ("bert", "gpt2")
# Training graphs Dynamo splits, and why (each model is otherwise one forward and one backward
# graph). None now: GPT2LMHeadModel's loss_function property calls logger.warning_once (it has no
# loss_type), a graph break under plain torch.compile, a no-op while Dynamo traces a pipec model
# (cli trace_settings.py), so its loss stays in the head's graph.
TRAINING_BREAKS: dict[str, int] = {}


def _run_inference(built, compiled):
    with torch.no_grad():
        expected = built.model(*built.inputs)
        got = compiled(*built.inputs)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("name", [a.name for a in hf_models.ARCHS])
def test_inference(name):
    built = hf_models.build(name, hf_models.TINY)
    compiled = pipec.compile(built.model)
    _run_inference(built, compiled)
    graphs = compiled.pipec_session.graphs
    assert [g.kind for g in graphs] == ["inference"], f"{name}: expected one graph, got {len(graphs)}"


@pytest.mark.parametrize("name", THROUGH_TORCH_COMPILE)
def test_inference_torch_compile_backend(name):
    built = hf_models.build(name, hf_models.TINY)
    _run_inference(built, torch.compile(built.model, backend="pipec"))


# Exported whole through torch.export and run from the artifact alone: an encoder with a padding
# mask, decoders with their KV cache on (their causal masks folded into `is_causal`), a vision
# transformer (its all-true mask dropped), a conv net. (The artifact keeps SDPA as the portable
# op; an encoder's boolean mask is made additive once, in a kernel of its own, for every call.)
THROUGH_EXPORT = ("bert", "gpt2", "llama", "vit", "convnext")


@pytest.mark.parametrize("name", THROUGH_EXPORT)
def test_exported_artifact_matches_eager(name, tmp_path):
    built = hf_models.build(name, hf_models.TINY)
    exported = pipec.export(built.model, built.inputs, tmp_path / f"{name}.pipec")
    _run_inference(built, pipec.load(tmp_path / f"{name}.pipec"))
    # issue 19: what a user deploys fuses as what they measured with pipec.compile
    compiled = pipec.compile(copy.deepcopy(built.model))
    _run_inference(built, compiled)
    assert _plan_summary(exported.session.graphs) == _plan_summary(compiled.pipec_session.graphs)


def _plan_summary(graphs) -> tuple[int, list[str]]:
    """Generated kernels and library calls of `graphs`; attention is one library call either way
    (the artifact keeps the portable op, compile the tracing device's kernel)."""
    externs = ["attention" if "scaled_dot_product" in op else op for g in graphs for op, _ in g.extern_ops]
    return sum(g.kernel_count for g in graphs), sorted(externs)


@pytest.mark.parametrize("name", hf_models.TRAINING)
def test_training_step(name):
    built = hf_models.build_training(name)
    eager = built.model
    model = copy.deepcopy(eager)  # copied before compiling: the compiled wrapper sets attributes on it
    compiled = pipec.compile(model)
    loss = compiled(*built.inputs)
    loss.backward()
    expected = eager(*built.inputs)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    grads = {n: p.grad for n, p in model.named_parameters()}
    expected_grads = {n: p.grad for n, p in eager.named_parameters()}
    missing = sorted(n for n, g in expected_grads.items() if g is not None and grads[n] is None)
    assert not missing, f"{name}: no gradient for {missing[:3]}"
    torch.testing.assert_close(grads, expected_grads)
    torch.testing.assert_close(dict(model.named_buffers()), dict(eager.named_buffers()))
    kinds = sorted(g.kind for g in compiled.pipec_session.graphs)
    graphs = 1 + TRAINING_BREAKS.get(name, 0)
    assert kinds == ["backward"] * graphs + ["forward"] * graphs, kinds


def test_real_sizes_are_the_published_models():
    """Each real config has its checkpoint's parameter count (within 3%: heads and tied embeddings vary)."""
    counts = {name: hf_models.parameter_count(name) / 1e6 for name in hf_models.BY_NAME}
    off = {name: f"{count:.1f}M, published {hf_models.PUBLISHED_MILLIONS[name]}M" for name, count in counts.items()
           if abs(count / hf_models.PUBLISHED_MILLIONS[name] - 1) > 0.03}
    assert not off, off


def test_results_of_split_runs_combine_into_one_table(tmp_path):
    """benchmarks/real_models.py --combine: a suite run split over several device commands
    becomes one results file and one table, every case once, the parts' start times named."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    whole = json.loads((root / "benchmarks" / "results" / "real_models_h200_run9.json").read_text())
    parts = []
    for k, cases in enumerate((whole["cases"][:3], whole["cases"][3:5] + whole["cases"][:1])):
        part = tmp_path / f"part{k}.json"
        part.write_text(json.dumps({**whole, "started": f"start{k}", "cases": cases}))
        parts.append(str(part))
    out = tmp_path / "all.json"
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "real_models.py"), "--out", str(out),
                           "--combine", *parts], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    combined = json.loads(out.read_text())
    assert [c["case"] for c in combined["cases"]] == [c["case"] for c in whole["cases"][:5]]
    table = out.with_suffix(".md").read_text()
    assert "part0.json from start0" in table and "part1.json from start1" in table
    assert sum(line.startswith(f"| {c['case']} |") for c in whole["cases"][:5] for line in table.splitlines()) == 5
    bad = subprocess.run([sys.executable, str(root / "benchmarks" / "real_models.py"), "--out", str(out),
                          "--combine", str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "cannot read a results file" in bad.stderr


def test_reduce_overhead_pair_alone(tmp_path):
    """--no-pipec-default: pipec runs only in reduce-overhead mode (its main row, renamed), so the
    CUDA Graph pair costs one compile fewer a case; the row is complete without a default time."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "ro.json"
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "real_models.py"), "--out", str(out),
                           "--size", "tiny", "--device", "cpu", "--cases", "distilbert", "--rounds", "1",
                           "--budget", "300", "--no-pipec-default"], capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    case, = json.loads(out.read_text())["cases"]
    assert case["status"] == "ok" and not case["missing"]
    assert set(case["rows"]) == {"eager", "pipec-reduce-overhead"}
    assert case["rows"]["pipec-reduce-overhead"]["ms"] > 0
    assert case["rows"]["pipec-reduce-overhead"]["max_error"] < 1e-4


def test_breadth_sweep_runs_deepseek_v3():
    """benchmarks/hf_sweep.py on DeepSeek-V3, whose attention key is built in place (`new_empty`
    and two slice copies): the sweep found it off by 0.027 before capture kept the copies."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "hf_sweep.py"), "deepseek_v3"],
                          capture_output=True, text=True, timeout=400)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith('{"arch"')), None)
    assert line is not None, proc.stderr[-2000:]
    record = json.loads(line)
    assert record["status"] == "ok", record
    assert record["max_abs_err"] < 1e-4


def test_a_run_with_a_deadline_starts_only_what_fits(tmp_path):
    """real_models.py --deadline/--expect/--skip-done: a split suite run wastes no command on a case
    cut off at the command's limit. A case done in earlier results is not run; a case expected to
    outlast the deadline is not started, and the results say so."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done, measured = tmp_path / "done.json", tmp_path / "measured.json"
    done.write_text(json.dumps({"cases": [{"case": "bert", "status": "ok", "seconds": 50.0}]}))
    measured.write_text(json.dumps({"cases": [
        {"case": "gpt2", "status": "ok", "seconds": 80.0},  # 97 s expected: past a 60 s deadline
        {"case": "vit", "status": "timed out", "seconds": 20.0}]}))  # cut off: its seconds predict nothing
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "real_models.py"), "--out", str(out),
                           "--size", "tiny", "--device", "cpu", "--cases", "gpt2,bert", "--deadline", "60",
                           "--expect", str(measured), "--skip-done", str(done)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "done in earlier results, not run: bert" in proc.stdout
    assert "not started (they would not end before the 60 s deadline): gpt2" in proc.stdout
    results = json.loads(out.read_text())
    assert results["cases"] == [] and results["not_started"] == ["gpt2"]
    assert "Not started" in out.with_suffix(".md").read_text()
    assert real_models_module().earlier_seconds([measured]) == {"gpt2": 80.0}


def test_cases_left_after_the_last_case_run_are_in_the_results(tmp_path, monkeypatch):
    """Session 45's second part printed the seven cases it left, but its JSON listed none: the
    results were written only after each case run."""
    import json
    import sys

    real_models = real_models_module()
    measured = tmp_path / "earlier.json"
    measured.write_text(json.dumps({"cases": [{"case": "gpt2", "status": "ok", "seconds": 500.0}]}))
    ran = []

    def run_case(case, args, workdir):
        ran.append(case["case"])
        return {"case": case["case"], "status": "ok", "seconds": 1.0, "bench": {}, "rows": {}, "attempts": [],
                "what": case["what"], "shape": case["shape"], "error": None, "errors": {}, "note": None,
                "missing": [], "arch": case["case"], "family": "encoder", "size": "tiny"}

    monkeypatch.setattr(real_models, "run_case", run_case)
    monkeypatch.setattr(real_models, "warm_imports", lambda: None)
    out = tmp_path / "run.json"
    monkeypatch.setattr(sys, "argv", ["real_models.py", "--out", str(out), "--size", "tiny", "--device", "cpu",
                                      "--cases", "bert,gpt2", "--deadline", "100", "--expect", str(measured)])
    real_models.main()
    assert ran == ["bert"]
    assert json.loads(out.read_text())["not_started"] == ["gpt2"]
    assert "Not started" in out.with_suffix(".md").read_text()


@pytest.mark.parametrize("failed", [False, True])
def test_a_child_whose_results_are_complete_is_not_waited_for(tmp_path, failed):
    """A `pipec bench` child spent 3-4 s a case exiting after its last write (session 46): once its
    results say `complete`, the suite kills it, and reports what bench's own exit would have said."""
    import json
    import sys
    import time

    real_models = real_models_module()
    part = tmp_path / "case.json"
    row = {"name": "pipec", "error": "compile failed" if failed else None}
    result = {"model": "m", "complete": True, "backends": [{"name": "eager", "error": None}, row]}
    child = f"import json, pathlib, time; pathlib.Path({str(part)!r}).write_text({json.dumps(result)!r}); time.sleep(60)"
    start = time.perf_counter()
    got = real_models.run_bench_process([sys.executable, "-c", child], {}, 120, part)
    assert time.perf_counter() - start < 20 and got["reaped"]
    assert got["exit"] == (1 if failed else 0)
    assert got["error"] == ("m: 1 backend(s) failed; pipec: compile failed" if failed else None)


def real_models_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "real_models.py"
    spec = importlib.util.spec_from_file_location("real_models_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_deadline_budgets_and_expectations():
    import time

    real_models = real_models_module()
    start = time.perf_counter() - 100  # 100 s into a 400 s run: 300 left
    deadline = real_models.Deadline(400, {"small": 100.0, "large": 270.0}, 240.0, start)
    assert deadline.fits("small") and not deadline.fits("large")  # 120 s and 315.5 s with the margin
    assert deadline.fits("unknown")  # no expectation: it starts while a minute is left
    assert 230 < deadline.case_budget() <= 240  # the budget, as the deadline is further away
    late = real_models.Deadline(400, {}, 240.0, time.perf_counter() - 300)
    assert late.fits("unknown") and 95 < late.case_budget() <= 100  # a budget never runs past the deadline
    assert not real_models.Deadline(400, {}, 240.0, time.perf_counter() - 350).fits("unknown")  # 50 s left
    assert real_models.Deadline(None, {}, 240.0, start).fits("anything")


def test_deadline_follows_the_hosts_pace():
    import time

    real_models = real_models_module()
    deadline = real_models.Deadline(400, {"a": 100.0, "b": 50.0, "c": 300.0}, 240.0,
                                    time.perf_counter() - 100)  # 300 s left
    assert not deadline.fits("c")  # 350 s with the margin, on a host as fast as the earlier one
    deadline.finished("a", 50.0)
    deadline.finished("b", 30.0)  # this host takes 0.5x and 0.6x: pace 0.55
    assert abs(deadline.pace() - 0.55) < 1e-9 and deadline.fits("c")  # 194.75 s
    deadline.finished("unknown", 10.0)  # no earlier seconds: says nothing of the pace
    assert abs(deadline.pace() - 0.55) < 1e-9
    slow = real_models.Deadline(400, {"a": 100.0, "b": 150.0}, 240.0, time.perf_counter())
    slow.finished("a", 900.0)  # a pace past the limit is held to it
    assert slow.pace() == real_models.PACE_LIMITS[1] and not slow.fits("b")  # 522.5 s, not 177.5


def test_the_table_splits_held_memory_into_graph_pools_and_the_callers():
    """benchmarks/real_models.py's held column: each backend's held MiB, its CUDA Graph pools'
    share in parentheses (`pipec bench`'s held_pools_mib), nothing added where a run has none."""
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "benchmarks"))
    import real_models

    (case,) = json.loads((root / "benchmarks" / "results" / "real_models_h200_run9.json").read_text())["cases"][:1]
    rows = case["rows"]
    rows["inductor-reduce-overhead"] = {**rows.get("inductor", {}), "held_mib": 344.2, "held_pools_mib": 330.0}
    rows["pipec-reduce-overhead"] = {**rows.get("pipec", {}), "held_mib": 1736.0, "held_pools_mib": 1500.4}
    rows["inductor"]["held_mib"], rows["pipec"]["held_mib"] = 0.0, 32.0
    (cells,) = real_models.table_rows([case])
    assert "0 / 344 (330) / 32 / 1736 (1500)" in cells
