"""`pipec bench` and benchmarks/suite.py on the CPU: tiny models, short timing loops."""

import importlib.util
import json
import subprocess
import sys
import time

import pytest
import torch

from pipec import bench, bench_measure, bench_process
from pipec.bench import BackendResult, BenchOptions, Timed, count_flops, cpu_median_ms, io_bytes, time_rounds
from pipec_cli_testing import HERE, one_error_line, run

REPO = HERE.parents[2]
QUICK = ["--warmup", "1", "--rep", "3", "--device", "cpu"]


def _load_suite(name: str = "suite"):
    spec = importlib.util.spec_from_file_location(f"pipec_bench_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- what one call moves and computes


def test_io_bytes_counts_inputs_weights_outputs_once():
    lin = torch.nn.Linear(4, 3)  # 12 + 3 floats
    x = torch.randn(2, 4)
    out = lin(x)
    assert io_bytes(lin, (x, x), out) == 4 * (8 + 15 + 6)  # x twice is one read
    view = x.view(8)  # a view of an input is the input's storage
    assert io_bytes(lambda a, b: a, (x, view), x) == 4 * 8


def test_count_flops_sees_matmuls_only():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert count_flops(torch.mm, (a, b)) == 2 * 8 * 16 * 4
    assert count_flops(lambda t: torch.relu(t) + 1, (a,)) == 0


def test_cpu_median_ms_measures_the_call():
    assert 4.0 <= cpu_median_ms(lambda: time.sleep(0.005), warmup_ms=0, rep_ms=20) < 50


def test_time_rounds_rotates_the_order_and_takes_each_backends_median(monkeypatch):
    """Round r starts r places along; a backend's time is the median of its rounds, so one slow
    round (a GPU heated by the backend before it) does not decide."""
    order, scripted = [], {"a": [1.0, 9.0, 1.2], "b": [2.0, 2.2, 2.1], "c": [3.0, 3.3, 3.1]}
    monkeypatch.setattr(bench, "measure_ms", lambda call, *args: call())
    pending = []
    for name in "abc":
        pending.append(Timed(BackendResult(name, name), lambda n=name: (order.append(n), scripted[n].pop(0))[1]))
    time_rounds(pending, "cpu", BenchOptions(pipec=None, rounds=3, extra_rounds=0))
    assert order == list("abc" "bca" "cab")
    assert [t.result.ms for t in pending] == [1.2, 2.1, 3.1]
    assert pending[0].result.ms_rounds == [1.0, 9.0, 1.2]


def test_rounds_that_disagree_get_one_more_round_of_every_backend(monkeypatch):
    """Two rounds 50% apart (one disturbed): a third round of every backend, and the median of
    three leaves the disturbed round out; rounds that agree get none, and the extra rounds stop
    at `extra_rounds` even while they still disagree."""
    monkeypatch.setattr(bench, "measure_ms", lambda call, *args: call())

    def backends(scripted):
        order = []
        timed = [Timed(BackendResult(n, n), lambda n=n: (order.append(n), scripted[n].pop(0))[1]) for n in scripted]
        return timed, order

    pending, order = backends({"a": [1.0, 1.5, 1.05], "b": [2.0, 2.02, 2.01]})
    assert time_rounds(pending, "cpu", BenchOptions(pipec=None, rounds=2, extra_rounds=1)) == 3
    assert order == list("ab" "ba" "ab") and [t.result.ms for t in pending] == [1.05, 2.01]
    pending, order = backends({"a": [1.0, 1.02], "b": [2.0, 2.02]})
    assert time_rounds(pending, "cpu", BenchOptions(pipec=None, rounds=2, extra_rounds=1)) == 2
    pending, order = backends({"a": [1.0, 1.5, 2.0, 1.1, 9.0], "b": [2.0] * 5})
    assert time_rounds(pending, "cpu", BenchOptions(pipec=None, rounds=2, extra_rounds=2)) == 4
    assert pending[0].result.ms == pytest.approx(1.3) and pending[0].result.rounds_spread > 0.1


def test_time_rounds_keep_going_drops_a_backend_that_fails_while_timed(monkeypatch):
    """With keep_going, a call that raises costs its backend's time (the error is kept), not the others'."""
    monkeypatch.setattr(bench, "measure_ms", lambda call, *args: call())

    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore detail")

    pending = [Timed(BackendResult("a", "a"), lambda: 1.0), Timed(BackendResult("b", "b"), broken)]
    time_rounds(pending, "cpu", BenchOptions(pipec=None, rounds=2, keep_going=True))
    assert pending[0].result.ms == 1.0 and pending[1].result.ms is None
    assert pending[1].result.error == "timing: RuntimeError: CUDA error: an illegal memory access was encountered"
    with pytest.raises(RuntimeError, match="illegal memory access"):  # without keep_going it propagates
        time_rounds([Timed(BackendResult("b", "b"), broken)], "cpu", BenchOptions(pipec=None))


def test_backends_are_timed_as_compiled_not_recompiled(monkeypatch):
    """Timing comes after every cold compile, and no Dynamo reset in between: a timed call must
    not re-trace (a reset drops the entries of every model compiled before it)."""
    from torch._dynamo.utils import counters

    from pipec.api import make_options
    from pipec.bench import run_bench

    frames_at_timing = []

    def fake_measure(call, *args):
        call()
        frames_at_timing.append(counters["frames"]["ok"])
        call()
        frames_at_timing.append(counters["frames"]["ok"])
        return 1.0

    monkeypatch.setattr(bench, "measure_ms", fake_measure)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU())
    options = BenchOptions(pipec=make_options(), inductor=False, rounds=2, warmup_ms=0, rep_ms=1)
    result = run_bench(model, (torch.randn(4, 5),), "seq", options)
    assert [b.name for b in result.backends] == ["eager", "pipec"]
    assert len(frames_at_timing) == 8 and len(set(frames_at_timing)) == 1  # nothing traced while timing
    assert result.backend("pipec").compile_warm_s is not None  # the warm compile ran, after the timing


def test_the_model_is_traced_once_before_any_timed_compile(monkeypatch):
    """The first trace of the model's own code costs more than later ones (Dynamo's analyses
    outlive a reset): bench pays it in a Dynamo-only trace, before the first cold compile."""
    from pipec.api import make_options
    from pipec.bench import run_bench

    events = []
    real_trace, real_pipec = bench_process.trace_model_once, bench.bench_pipec
    monkeypatch.setattr(bench_process, "trace_model_once", lambda *a: events.append("trace") or real_trace(*a))
    monkeypatch.setattr(bench, "bench_pipec", lambda *a, **k: events.append("pipec") or real_pipec(*a, **k))
    monkeypatch.setattr(bench, "measure_ms", lambda call, *args: 1.0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU())
    options = BenchOptions(pipec=make_options(), inductor=False, rounds=1, warmup_ms=0, rep_ms=1, warm=False)
    result = run_bench(model, (torch.randn(4, 5),), "seq", options)
    assert events == ["trace", "pipec"]
    assert result.first_trace_s > 0 and result.to_dict()["first_trace_s"] == result.first_trace_s
    assert not hasattr(model, "_orig_mod") and not isinstance(model, torch._dynamo.eval_frame.OptimizedModule)


def test_trace_model_once_is_none_where_dynamo_fails():
    def broken(x):
        raise ValueError("not traceable here")

    assert bench_process.trace_model_once(broken, (torch.randn(2),)) is None


def test_timing_warnings_name_a_loaded_machine_and_disagreeing_rounds():
    from pipec.bench_measure import rounds_spread, timing_warnings

    calm = BackendResult("eager", "eager", ms_rounds=[1.0, 1.05, 1.02])
    noisy = BackendResult("pipec", "pipec (default, launch)", ms_rounds=[1.0, 1.3, 1.1])
    for b in (calm, noisy):
        b.rounds_spread = rounds_spread(b.ms_rounds)
    assert calm.rounds_spread == pytest.approx(0.05) and rounds_spread([2.0]) is None
    assert timing_warnings({"start": 0.5, "end": 1.5, "cpus": 2}, [calm]) == []
    # one high reading alone (the benchmark's own compile in the 1-minute average) is not enough
    assert timing_warnings({"start": 6.0, "end": 1.5, "cpus": 2}, [calm]) == []
    assert timing_warnings({"start": None, "end": None, "cpus": 2}, [calm]) == []  # no load average here
    loaded, rounds = timing_warnings({"start": 5.8, "end": 4.0, "cpus": 2}, [calm, noisy])
    assert loaded.startswith("load average 5.8 on 2 CPUs: other processes compete")
    assert rounds == "pipec (default, launch): timing rounds disagree by 30% (1, 1.3, 1.1 ms)"


def test_run_bench_records_the_load_and_the_rounds_spread(monkeypatch):
    from pipec import bench_measure
    from pipec.api import make_options
    from pipec.bench import run_bench

    # calls in rounds of rotated order: eager, pipec | pipec, eager | eager, pipec
    times = iter([1.0, 5.0, 5.6, 5.0, 1.0, 5.0])  # eager 1, 5, 1 (400% apart); pipec 5, 5.6, 5 (12%)
    monkeypatch.setattr(bench, "measure_ms", lambda call, *args: next(times))
    loads = iter([7.5, 6.25])
    monkeypatch.setattr(bench_measure, "load_average", lambda: next(loads))
    monkeypatch.setattr(bench_measure, "usable_cpus", lambda: 4)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU())
    options = BenchOptions(pipec=make_options(), inductor=False, rounds=3, extra_rounds=0, warmup_ms=0, rep_ms=1,
                           warm=False)
    result = run_bench(model, (torch.randn(4, 5),), "seq", options)
    data = result.to_dict()
    assert data["load_average"] == {"start": 7.5, "end": 6.25, "cpus": 4}
    eager, pipec = data["backends"]
    assert eager["rounds_spread"] == pytest.approx(4.0) and pipec["rounds_spread"] == pytest.approx(0.12)
    assert len(data["timing_warnings"]) == 3
    assert data["timing_warnings"][0].startswith("load average 7.5 on 4 CPUs")
    assert "eager: timing rounds disagree by 400%" in data["timing_warnings"][1]
    table = bench.bench_table(result)
    assert table.caption.startswith("WARNING, timings may not be trusted: load average 7.5 on 4 CPUs")
    assert table.columns[1]._cells[0].endswith("±400%")


# ---------------------------------------------------------------- the command, real stages


def test_bench_table_on_cpu(capsys, model_file):
    code, out, err = run(["bench", model_file, *QUICK], capsys)
    assert code == 0, err
    assert "pipec bench · tiny" in out and "perf_counter" in out
    timings, profile = out.split("pipec compile-time profile · tiny")
    rows = [ln for ln in timings.splitlines() if ln.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["eager", "pipec (default, launch)"]  # no Inductor on CPU
    assert "Triton's interpreter" in err
    assert "Triton compilation" in profile and "first call (wall)" in profile


def test_bench_json(capsys, model_file, tmp_path):
    saved = tmp_path / "bench.json"
    code, out, err = run(["bench", model_file, *QUICK, "--json", "-o", saved, "--option", "combo_kernels=false"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data == json.loads(saved.read_text())
    assert data["pipec_options"]["extra"] == {"combo_kernels": False}  # --option reached pipec's rows
    assert data["bytes"] == 3 * 4 * 5 * 4 and data["flops"] == 0  # a, b, output: 4x5 float32 each
    assert data["inputs"] == ["f32[4, 5]", "f32[4, 5]"] and data["interpreter"] is True
    eager, pipec = data["backends"]
    assert (eager["name"], pipec["name"]) == ("eager", "pipec")
    assert pipec["kernels"] == 1 and pipec["extern_ops"] == 0  # relu, mul, add: one fused kernel
    assert pipec["speedup_vs_eager"] == pytest.approx(eager["ms"] / pipec["ms"])
    assert pipec["tb_per_s"] == pytest.approx(data["bytes"] / (pipec["ms"] * 1e-3) / 1e12)
    assert pipec["tflop_per_s"] is None and pipec["speedup_vs_inductor"] is None
    assert pipec["compile_cold_s"] > 0 and pipec["compile_warm_s"] > 0
    # the warm compile came from AOTAutograd's cache, which holds pipec's graph (pipec/aot_cache.py)
    assert pipec["cache_hits"] == {"aot_autograd": 1}
    assert pipec["max_error"] < 1e-6
    assert pipec["tuning"] == [] and eager["tuning"] is None  # the CPU interpreter tunes nothing
    for profile in (pipec["compile_profile"], pipec["compile_profile_warm"]):  # where each first call went
        assert sum(profile["seconds"].values()) == pytest.approx(profile["wall_s"], rel=0.05)
        assert all(s >= 0 for s in profile["seconds"].values()) and profile["counts"]["graphs"] == 1
    assert pipec["compile_profile"]["wall_s"] >= pipec["compile_cold_s"]  # the window holds the timed call
    assert pipec["compile_profile"]["seconds"]["codegen"] > 0
    assert eager["compile_profile"] is None
    # the command's clock starts before the model file is loaded: its phases cover the whole run
    phases = list(data["phase_seconds"])
    assert phases[:3] == ["loading the model file (building the model, moving it to the device)",
                          "setting up: copies of the model, eager's outputs, its bytes and FLOPs",
                          "warming up the process: pipec's tiny compile"]


def test_record_tuning_keeps_what_the_runtime_logs_while_it_runs():
    """`tuning` in bench's JSON: the "pipec.tuning" lines of pipec's cold compile, recorded
    whatever the logger's level, which is restored after."""
    import logging

    log = logging.getLogger("pipec.tuning")
    before = log.level
    log.info("before: not recorded")
    with bench.record_tuning() as lines:
        log.info("kernel_0: config %d of %d, %.4f ms", 1, 3, 0.25)
    log.info("after: not recorded")
    assert lines == ["kernel_0: config 1 of 3, 0.2500 ms"] and log.level == before


# ---------------------------------------------------------------- numerics and usage errors (fake stages)


def test_bench_mismatch_is_exit_1(fake_stages, capsys, model_file):
    code, out, err = run(["bench", model_file, *QUICK, "--runtime", "wrong"], capsys)
    assert code == 1
    line = one_error_line(err)
    assert line.startswith("error: tiny: pipec (default, wrong) differs from eager: output 0 differs")
    assert out == ""


def test_bench_extra_pipec_mode_is_a_row_of_its_own(fake_stages, capsys, model_file):
    code, out, err = run(["bench", model_file, *QUICK, "--pipec-mode", "reduce-overhead", "--json"], capsys)
    assert code == 0, err
    backends = json.loads(out)["backends"]
    assert [(b["name"], b["label"]) for b in backends] == [
        ("eager", "eager"), ("pipec", "pipec (default, launch)"), ("pipec-reduce-overhead", "pipec (default, cudagraph)")]
    assert all(b["ms"] > 0 and b["error"] is None for b in backends)
    assert all(b["peak_mib"] is None and b["held_mib"] is None and b["held_pools_mib"] is None
               for b in backends)  # memory: on CUDA only
    assert all(b["compile_profile"]["counts"]["graphs"] == 1 for b in backends[1:])  # each pipec row's own
    assert all(b["compile_warm_s"] is not None for b in backends[1:])


def test_bench_no_warm_skips_the_warm_compiles(fake_stages, capsys, model_file):
    code, out, err = run(["bench", model_file, *QUICK, "--no-warm", "--json"], capsys)
    assert code == 0, err
    eager, pipec = json.loads(out)["backends"]
    assert pipec["ms"] > 0 and pipec["compile_cold_s"] > 0 and pipec["compile_warm_s"] is None


def test_bench_profile_table_has_a_column_pair_per_pipec_row():
    from pipec.bench import BackendResult, BenchResult, profile_table

    def profile(wall):
        return {"wall_s": wall, "seconds": {"dynamo": wall / 2, "other": wall / 2}, "counts": {"graphs": 1}}

    result = BenchResult("m", "cpu", "cpu", "t", True, [], 0, 0, None, {}, {}, backends=[
        BackendResult("eager", "eager"),
        BackendResult("pipec", "p", compile_profile=profile(2.0), compile_profile_warm=profile(1.0)),
        BackendResult("pipec-max-autotune", "p", compile_profile=profile(4.0))])
    table = profile_table(result)
    assert [c.header for c in table.columns] == ["part", "pipec cold", "pipec warm", "pipec-max-autotune cold",
                                                 "pipec-max-autotune warm"]
    assert list(table.columns[3].cells) == ["2.00 s (50%)", "2.00 s (50%)", "4.00 s"]
    assert list(table.columns[4].cells) == ["-", "-", "-"]  # no warm compile measured
    assert profile_table(BenchResult("m", "cpu", "cpu", "t", True, [], 0, 0, None, {}, {})) is None


def test_bench_keep_going_keeps_the_other_rows(fake_stages, capsys, model_file, tmp_path):
    """--keep-going: the failing backend's row has its error, the others are still timed; exit 1."""
    saved = tmp_path / "bench.json"
    code, out, err = run(["bench", model_file, *QUICK, "--runtime", "wrong", "--pipec-mode", "reduce-overhead",
                          "--keep-going", "-o", saved], capsys)
    assert code == 1
    line = one_error_line(err)
    assert line.startswith("error: tiny: 1 backend(s) failed; pipec: pipec (default, wrong) differs from eager")
    assert "pipec failed: pipec (default, wrong) differs from eager" in out  # the table's caption
    eager, wrong, graphs = json.loads(saved.read_text())["backends"]
    assert wrong["name"] == "pipec" and "differs from eager" in wrong["error"] and wrong["ms"] is None
    assert eager["ms"] > 0 and graphs["ms"] > 0 and graphs["error"] is None


def test_bench_tolerance_from_the_model_file(fake_stages, capsys, tmp_path):
    path = tmp_path / "tol.py"
    path.write_text("import torch\nmodel = torch.relu\nexample_inputs = (torch.randn(3, 4),)\n"
                    "tolerance = dict(atol=1.5, rtol=0.0)\n")  # the "wrong" runtime is off by one
    code, _, err = run(["bench", path, *QUICK, "--runtime", "wrong", "--json"], capsys)
    assert code == 0, err
    code, _, err = run(["bench", path, *QUICK, "--runtime", "wrong", "--atol", "0.5", "--rtol", "0"], capsys)
    assert code == 1 and "differs from eager" in one_error_line(err)


@pytest.mark.parametrize("argv, message", [
    (["--inductor-mode", "fastest"], "unknown --inductor-mode 'fastest'"),
    (["--atol", "1e-3"], "give --atol and --rtol together"),
    (["--rep", "0"], "--rep must be a finite number > 0"),
    (["--extra-rounds", "-1"], "--extra-rounds must be at least 0"),
    (["--option", "grouped_matmuls"], "--option wants KEY=VALUE, got 'grouped_matmuls'"),
])
def test_bench_usage_errors(fake_stages, capsys, model_file, argv, message):
    code, _, err = run(["bench", model_file, *argv], capsys)
    assert code == 2
    assert message in one_error_line(err)


@pytest.mark.parametrize("tolerance", ["1e-3", "dict(atol=float('nan'), rtol=0.0)", "dict(atol=0.1, rtol=-1)"])
def test_bench_bad_tolerance_in_file(fake_stages, capsys, tmp_path, tolerance):
    path = tmp_path / "bad.py"
    path.write_text(f"import torch\nmodel = torch.relu\nexample_inputs = (torch.ones(2),)\ntolerance = {tolerance}\n")
    code, _, err = run(["bench", path, *QUICK], capsys)
    assert code == 2
    assert one_error_line(err) == ("error: `tolerance` in bad.py must be dict(atol=FLOAT, rtol=FLOAT), "
                                   "finite numbers >= 0")


# ---------------------------------------------------------------- the suite


def test_suite_targets_judge_met_and_missed():
    suite = _load_suite()
    bench = {"best_inductor": "inductor", "backends": [
        {"name": "pipec", "label": "pipec", "ms": 0.5, "tb_per_s": 3.0, "fraction_of_copy": 0.75,
         "compile_cold_s": 10.0},
        {"name": "inductor", "label": "inductor (default)", "ms": 0.4, "compile_cold_s": 20.0},
    ]}
    faster = suite.Target("≥ 3.4 TB/s", 3.4, True, suite.pipec_tbps).judge(bench)
    assert faster["met"] is False and faster["verdict"] == "missed by 11.8%"
    assert faster["measured"] == "3.00 TB/s, 75% of copy"
    vs = suite.Target("≤ best Inductor", 1.0, True, suite.pipec_vs_best_inductor).judge(bench)
    assert vs["value"] == pytest.approx(0.8) and vs["verdict"] == "missed by 20.0%"
    ms = suite.Target("≤ 0.80 ms", 0.80, False, suite.pipec_ms).judge(bench)
    assert ms["met"] is True and ms["verdict"] == "met (37.5% margin)"
    compile_time = suite.Target("c", 0.25, False, suite.compile_vs_max_autotune(48.0)).judge(bench)
    assert compile_time["value"] == pytest.approx(10 / 48) and "issue's figure" in compile_time["measured"]
    assert suite.Target("x", 1.0, True, suite.pipec_ms).judge({"backends": []})["met"] is None


def test_suite_cases_are_model_files():
    suite = _load_suite()
    for case in suite.CASES:
        source = (suite.MODELS / f"{case.name}.py").read_text()
        assert "def example_inputs" in source and "def small_inputs" in source, case.name


def test_suite_smoke_run(tmp_path):
    """The whole suite path (child `pipec bench`, results file, summary) on one small case."""
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "suite.py"), "--smoke", "--cases",
                           "softmax_bf16", "--out", str(out), "--warmup", "1", "--rep", "3"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads(out.read_text())
    (case,) = results["cases"]
    assert case["status"] == "ok" and case["bench"]["model"] == "softmax_bf16"
    assert case["bench"]["inputs"] == ["f32[4, 100]"]
    assert case["targets"][0]["target"] == "≥ 3.4 TB/s" and case["targets"][0]["met"] is False
    assert "issue 6 suite" in proc.stdout and "softmax_bf16" in proc.stdout


# ---------------------------------------------------------------- the real-model suite (issue 19)


def _row(name, ms, **extra):
    return {"name": name, "ms": ms, "error": None, "compile_cold_s": 2.0, "max_error": 1e-3, "peak_mib": 10.0,
            **extra}


def test_real_models_table_ratios_and_failures():
    """One row per case: times, pipec's ratios to eager and to Inductor in the same mode, failures with their
    reasons (a case whose pipec failed keeps eager's and Inductor's numbers)."""
    suite = _load_suite("real_models")
    case = {"arch": "bert", "family": "encoder", "what": "bert-base-uncased", "shape": "8 × 512 bfloat16"}
    ok = {**case, "case": "bert", "status": "ok", "error": None, "errors": {}, "note": None, "rows": {
        "eager": _row("eager", 5.0), "inductor": _row("inductor", 4.0),
        "inductor-reduce-overhead": _row("inductor-reduce-overhead", 3.0),
        "pipec": _row("pipec", 2.0, kernels=7, extern_ops=2), "pipec-reduce-overhead": _row("pipec-ro", 3.0)}}
    failed = {**case, "case": "gpt2", "status": "failed", "error": "RuntimeError: boom",
              "errors": {"pipec": "RuntimeError: boom | pipe"}, "note": "split into two processes after: x",
              "rows": {"eager": _row("eager", 5.0), "pipec": {"name": "pipec", "error": "RuntimeError: boom | pipe"}}}
    (first, second) = suite.table_rows([ok, failed])
    column = dict(zip(suite.COLUMNS, first))
    assert column["pipec × eager"] == "2.5×" and column["pipec × Inductor"] == "2×"
    assert column["pipec RO × Inductor RO"] == "1×" and column["pipec kernels"] == "7 +2 extern"
    assert column["eager ms"] == "5" and column["error"] == ""
    column = dict(zip(suite.COLUMNS, second))
    assert column["status"] == "failed" and column["pipec ms"] == "-" and column["pipec × eager"] == "-"
    assert column["error"] == "pipec: RuntimeError: boom \\| pipe (split into two processes after: x)"
    text = suite.markdown([ok, failed], {"size": "real", "device": "cuda", "started": "t", "host": "h"})
    assert text.count("\n| bert |") == 1 and "1 of 2 cases ok." in text


def test_real_models_table_shows_an_inductor_row_timed_off_eager():
    suite = _load_suite("real_models")
    case = {"arch": "resnet", "family": "conv", "what": "resnet-50", "shape": "32 × 224 bfloat16", "case": "resnet",
            "status": "ok", "error": None, "errors": {}, "note": None, "rows": {
                "eager": _row("eager", 4.0),
                "inductor": _row("inductor", 3.0, numerics="inductor (default) differs from eager: output 0 "
                                                           "differs from eager: max abs error 1"),
                "pipec": _row("pipec", 2.0)}}
    (row,) = suite.table_rows([case])
    column = dict(zip(suite.COLUMNS, row))
    assert column["pipec × Inductor"] == "1.5×"
    assert column["error"] == "Inductor timed, but output 0 differs from eager: max abs error 1"


def test_real_models_reruns_split_only_after_a_crash():
    suite = _load_suite("real_models")
    rows = {"backends": [{"name": "pipec", "error": "timing: AcceleratorError: CUDA error: an illegal memory access"}]}
    assert suite._poisoned({"exit": 1, "bench": rows})
    assert suite._poisoned({"exit": -11, "bench": {}})  # killed by a signal
    assert not suite._poisoned({"exit": 1, "bench": {"backends": [{"name": "pipec", "error": "differs from eager"}]}})
    assert not suite._poisoned({"exit": "timed out", "bench": {}})


def test_real_models_says_when_the_budget_stopped_a_case_before_any_timing():
    suite = _load_suite("real_models")
    stopped = {"case": "bert", "status": "timed out", "rows": {
        "eager": {"name": "eager", "ms": None}, "pipec": {"name": "pipec", "ms": None, "compile_cold_s": 12.7},
        "pipec-reduce-overhead": {"name": "pipec-reduce-overhead", "ms": None, "compile_cold_s": 5.8}}}
    hint = suite.budget_hint(stopped, 55)
    assert "--budget 55 s stopped bert before any backend was timed" in hint and "18 s" in hint
    partly = {**stopped, "rows": {**stopped["rows"], "eager": {"name": "eager", "ms": 5.1}}}
    assert suite.budget_hint(partly, 55) is None  # something was timed: the table has it
    assert suite.budget_hint({**stopped, "status": "failed"}, 55) is None


def test_real_models_smoke_run(tmp_path):
    """benchmarks/real_models.py end to end on one tiny model on the CPU: child `pipec bench`, both pipec modes,
    the JSON and the markdown table."""
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "real_models.py"), "--size", "tiny",
                           "--device", "cpu", "--cases", "resnet", "--out", str(out), "--warmup", "1", "--rep", "3",
                           "--rounds", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads(out.read_text())
    (case,) = results["cases"]
    assert case["status"] == "ok" and case["shape"] == "2 × 32 float32", case
    assert set(case["rows"]) == {"eager", "pipec", "pipec-reduce-overhead"}
    assert case["rows"]["pipec"]["max_error"] < 1e-4
    assert "| resnet | resnet-50 (conv) | 2 × 32 float32 | ok |" in out.with_suffix(".md").read_text()
    # the child's seconds outside bench's phases, split into its start and its exit
    outside = case["attempts"][0]["outside_bench_s"]
    phases = sum(case["bench"]["phase_seconds"].values())
    assert outside["start"] > 0 and outside["exit"] >= 0
    assert outside["start"] + outside["exit"] + phases == pytest.approx(case["seconds"], abs=0.1)


def test_check_judges_a_low_precision_miss_against_float64():
    """A bf16 output outside the tolerance vs eager passes when it is as close to the float64 run
    as eager's own (BERT, T5 and ResNet in bf16 missed eager by one bf16 step, Inductor too)."""
    import torch

    from pipec.bench import BenchMismatch, BenchOptions, Expected, _check
    from pipec.reference import Float64Run

    exact = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    eager = torch.tensor([1.0, 2.0, 3.0625], dtype=torch.bfloat16)   # one step above the truth
    close = torch.tensor([1.0, 2.0, 2.9688], dtype=torch.bfloat16)   # one step below it
    far = torch.tensor([1.0, 2.0, 3.5], dtype=torch.bfloat16)
    expected = Expected(eager, lambda: Float64Run(exact, {}, {}))
    options = BenchOptions(pipec=None)
    assert _check("close", close, expected, options) > 0
    with pytest.raises(BenchMismatch):
        _check("far", far, expected, options)
    without_reference = Expected(eager, lambda: None)
    with pytest.raises(BenchMismatch):
        _check("close", close, without_reference, options)


def test_count_flops_is_none_when_the_counter_refuses():
    import torch

    from pipec.bench import count_flops

    class Refused(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("sdpa_flop_count: query/key/value shapes are incompatible")

    assert count_flops(Refused(), (torch.randn(2),)) is None


def test_profile_counts_say_how_many_compiles_ran_in_worker_processes():
    from pipec.profile import profile_counts

    assert "Triton compiles 74 (70 in workers)," in profile_counts(
        {"counts": {"triton_compiles": 74, "triton_compiles_in_workers": 70}})
    assert "Triton compiles 74," in profile_counts({"counts": {"triton_compiles": 74}})  # no workers ran


def test_profile_counts_say_how_many_kernels_came_from_the_launch_store():
    from pipec.profile import profile_counts

    line = profile_counts({"counts": {"triton_compiles": 20, "launches_from_store": 93}})
    assert "Triton compiles 20, launched from the launch store 93, kernels timed 0" in line
    assert "launch store" not in profile_counts({"counts": {"triton_compiles": 113}})


def test_profile_counts_say_how_many_kernels_launched_with_pdl():
    from pipec.profile import profile_counts

    line = profile_counts({"counts": {"triton_compiles": 20, "pdl_kernels": 17}})
    assert "Triton compiles 20, launched with PDL 17, kernels timed 0" in line
    assert "PDL" not in profile_counts({"counts": {"triton_compiles": 20}})


def _inductor_off_eager(monkeypatch):
    """Inductor compiled as the identity off by 1 (its outputs differ from eager's beyond any tolerance)."""
    import torch._dynamo

    real_compile = torch.compile

    def off_by_one(model, mode=None, **kwargs):
        return lambda *args: model(*args) + 1.0
    monkeypatch.setattr(torch, "compile", lambda model, **kw: off_by_one(model, **kw) if "backend" not in kw
                        else real_compile(model, **kw))


def test_an_inductor_mismatch_is_noted_in_its_row_and_still_timed(monkeypatch):
    """Inductor off eager (ResNet-50 bf16 on the H200 and H100) is noted in its row (`numerics`) and
    timed, so the table keeps its time beside pipec's; pipec's row is checked and timed as ever;
    pipec off eager stays fatal (the test above and --keep-going's)."""
    from pipec.api import make_options
    from pipec.bench import run_bench

    _inductor_off_eager(monkeypatch)
    monkeypatch.setattr(bench, "measure_ms", lambda call, *args: 1.0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU())
    options = BenchOptions(pipec=make_options(), inductor=True, rounds=1, warmup_ms=0, rep_ms=1, warm=False)
    result = run_bench(model, (torch.randn(4, 5),), "seq", options)
    assert [b.name for b in result.backends] == ["eager", "pipec", "inductor"]
    inductor = result.backend("inductor")
    assert inductor.numerics.startswith("inductor (default) differs from eager: output 0 differs from eager")
    assert inductor.error is None and inductor.ms == 1.0 and inductor.max_error == pytest.approx(1.0)
    assert result.backend("pipec").ms == 1.0 and result.backend("pipec").error is None
    assert result.derived(result.backend("pipec"))["speedup_vs_inductor"] == 1.0


def test_bench_command_warns_of_an_inductor_mismatch_and_exits_0(fake_stages, capsys, model_file, monkeypatch):
    import os

    _inductor_off_eager(monkeypatch)
    started = []  # Inductor's workers start before the model is loaded, inside bench's private caches
    monkeypatch.setattr(bench_process, "start_inductor_workers",
                        lambda: started.append(os.environ.get("TORCHINDUCTOR_CACHE_DIR")))
    code, out, err = run(["bench", model_file, *QUICK, "--inductor", "--no-warm", "--json"], capsys)
    assert code == 0, err
    assert len(started) == 1 and started[0] and started[0].endswith("torchinductor_cache_dir")
    assert started[0] != os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # the private caches are gone again
    phases = list(json.loads(out)["phase_seconds"])
    assert phases[:2] == ["starting Inductor's compile workers (in the background)",
                          "loading the model file (building the model, moving it to the device)"]
    assert "warning: tiny: inductor (default) differs from eager" in err and "timed all the same" in err
    rows = {b["name"]: b for b in json.loads(out)["backends"]}
    assert rows["pipec"]["ms"] > 0 and rows["inductor"]["ms"] > 0 and rows["inductor"]["numerics"]


def test_settle_calls_as_a_loop_holding_the_last_result():
    """Held memory is read after `settle`: each call runs while the previous result is still held
    (what makes pipec's reduce-overhead record its second variant, and Inductor's trees record at
    all), and nothing is held after it."""
    import weakref

    from pipec.bench_measure import SETTLE_CALLS, settle

    class Out:
        pass

    made: list = []
    alive_at_call: list[bool] = []

    def call():
        alive_at_call.append(bool(made) and made[-1]() is not None)
        out = Out()
        made.append(weakref.ref(out))
        return out

    settle(call)
    assert len(made) == SETTLE_CALLS >= 2
    assert alive_at_call == [False] + [True] * (SETTLE_CALLS - 1)
    assert all(ref() is None for ref in made)


CONV_SRC = '''
import torch

model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
example_inputs = (torch.randn(2, 3, 8, 8),)
'''


def test_to_channels_last_moves_4d_weights_and_inputs_only():
    from pipec.model_file import to_channels_last

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(6, 6))
    x, ids = torch.randn(2, 3, 8, 8), torch.arange(6).view(2, 3)
    model, (x2, ids2) = to_channels_last(model, (x, ids))
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last) and not model[0].weight.is_contiguous()
    assert model[1].weight.is_contiguous() and ids2 is ids
    assert x2.is_contiguous(memory_format=torch.channels_last) and torch.equal(x2, x)


def test_bench_channels_last_times_the_converted_model(fake_stages, capsys, tmp_path):
    path = tmp_path / "convnet.py"
    path.write_text(CONV_SRC)
    code, out, err = run(["bench", path, *QUICK, "--no-warm", "--channels-last", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert "(channels-last)" in result["model"]
    assert all(b["error"] is None for b in result["backends"])


def test_each_phase_of_a_run_has_its_wall_seconds(monkeypatch):
    """phase_seconds: the time between progress messages, by message, so a suite case's cost on a
    GPU lease can be split into its warm-up, trace, compiles and timing rounds."""
    import time as time_module

    from pipec.api import make_options
    from pipec.bench import run_bench

    real_pipec = bench.bench_pipec

    def slow_pipec(*a, **k):
        time_module.sleep(0.2)
        return real_pipec(*a, **k)

    monkeypatch.setattr(bench, "bench_pipec", slow_pipec)
    monkeypatch.setattr(bench, "measure_ms", lambda call, *args: 1.0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU())
    options = BenchOptions(pipec=make_options(), inductor=False, rounds=2, warmup_ms=0, rep_ms=1, warm=False)
    said = []
    result = run_bench(model, (torch.randn(4, 5),), "seq", options, progress=said.append)
    phases = result.to_dict()["phase_seconds"]
    assert list(phases) == list(dict.fromkeys(said))  # every message a phase, in order, messages still passed on
    assert phases["pipec: compiling (cold)"] >= 0.2
    assert phases["timing round 1 of 2"] < 0.2 and all(s >= 0 for s in phases.values())
    assert said[0].startswith("setting up") and "warming up the process: pipec's tiny compile" in phases
    assert not any("Inductor" in phase for phase in phases)  # no Inductor here: neither its warm-up nor its wait


def test_warm_copies_are_made_only_when_warm_compiles_are_timed(monkeypatch):
    """A copy of the model per compiled backend for its cold compile, and one more for its warm
    compile only when there is one (a real-size model's copies cost device memory and seconds)."""
    from pipec.api import make_options
    from pipec.bench import run_bench

    copies = []
    real_copy = bench_process.fresh_copy
    monkeypatch.setattr(bench_process, "fresh_copy", lambda m: copies.append(m) or real_copy(m))
    monkeypatch.setattr(bench_process, "trace_model_once", lambda *a: None)  # it copies the model too
    monkeypatch.setattr(bench, "measure_ms", lambda call, *args: 1.0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU())
    for warm, expected in ((False, 1), (True, 2)):
        copies.clear()
        options = BenchOptions(pipec=make_options(), inductor=False, rounds=1, warmup_ms=0, rep_ms=1, warm=warm)
        run_bench(model, (torch.randn(4, 5),), "seq", options)
        assert len(copies) == expected


def test_the_warm_up_waits_for_inductors_compile_workers(monkeypatch):
    """Inductor's first compile starts its worker processes in the background; the warm-up waits
    for them, so they do not take the cores from the first timed compile (module docstring of
    bench_process.wait_for_inductor_workers)."""
    from torch._inductor.async_compile import AsyncCompile

    from pipec.api import make_options

    waited, said = [], []
    monkeypatch.setattr(bench_process, "wait_for_inductor_workers", lambda: waited.append(True))
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)  # Inductor's tiny compile, stood in for
    bench_process.warm_up_process("cpu", make_options(), inductor=False)
    assert waited == []
    bench_process.warm_up_process("cpu", make_options(), inductor=True, progress=said.append)
    assert waited == [True]
    # Inductor's warm-up first, so its workers start while pipec's runs; the wait last
    assert said == ["warming up the process: Inductor's tiny compile", "warming up the process: pipec's tiny compile",
                    "warming up the process: waiting for Inductor's compile workers"]

    monkeypatch.undo()
    calls = []
    monkeypatch.setattr(AsyncCompile, "wait_pool_ready", classmethod(lambda cls, timeout: calls.append(timeout)))
    bench_process.wait_for_inductor_workers(timeout=7.0)
    assert calls == [7.0]

    def broken(cls, timeout):
        raise RuntimeError("no pool in this process")

    monkeypatch.setattr(AsyncCompile, "wait_pool_ready", classmethod(broken))
    bench_process.wait_for_inductor_workers()  # best effort: never raises


def test_private_caches_nest_and_workers_start_inside_them(monkeypatch):
    """`pipec bench` enters its private caches before it loads the model file and starts Inductor's
    workers there (bench_process.process_caches); run_bench's own private_caches then keeps them, so
    the workers and the timed compiles share one set of empty caches."""
    import os

    from torch._inductor.async_compile import AsyncCompile

    before = {k: os.environ.get(k) for k in bench_process.CACHE_ENV}
    seen = []
    monkeypatch.setattr(bench_process, "start_inductor_workers",
                        lambda: seen.append(os.environ.get("TRITON_CACHE_DIR")))
    with bench_process.process_caches(keep_caches=False, inductor=True), bench_process.private_caches() as inner:
        assert seen == [os.path.join(inner, "triton_cache_dir")]  # started inside the caches the compiles use
        assert os.environ["PIPEC_CACHE_DIR"] == os.path.join(inner, "pipec_cache_dir")
    assert {k: os.environ.get(k) for k in bench_process.CACHE_ENV} == before
    assert bench_process.PRIVATE_ROOT_ENV not in os.environ
    with bench_process.process_caches(keep_caches=True, inductor=False):  # --keep-caches, no Inductor
        assert {k: os.environ.get(k) for k in bench_process.CACHE_ENV} == before and len(seen) == 1

    monkeypatch.undo()
    calls = []
    monkeypatch.setattr(AsyncCompile, "use_process_pool", classmethod(lambda cls: calls.append(True)))
    bench_process.start_inductor_workers()
    assert calls == [True]

    def broken(cls):
        raise RuntimeError("no pool in this process")

    monkeypatch.setattr(AsyncCompile, "use_process_pool", classmethod(broken))
    bench_process.start_inductor_workers()  # best effort: never raises


def test_every_backends_cold_compile_has_torchs_own_split(monkeypatch):
    """torch_compile_phases: torch's compile-time counters over each cold compile, pipec's and
    Inductor's alike (Dynamo's trace, the backend call), so the two can be split the same way."""
    from pipec.api import make_options
    from pipec.bench import run_bench

    monkeypatch.setattr(bench, "measure_ms", lambda call, *args: 1.0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU())
    options = BenchOptions(pipec=make_options(), inductor=False, rounds=1, warmup_ms=0, rep_ms=1, warm=False)
    result = run_bench(model, (torch.randn(4, 5),), "seq", options)
    phases = result.to_dict()["backends"][1]["torch_compile_phases"]
    assert result.backends[1].name == "pipec" and phases, phases
    assert all(seconds >= 0.01 for seconds in phases.values())
    # the backend call holds pipec's stages; it cannot take longer than the whole first call
    backend_call = phases.get("OutputGraph.call_user_compiler")
    assert backend_call is None or backend_call <= result.backends[1].compile_cold_s

    before = bench_measure.torch_compile_seconds()
    assert bench_measure.torch_compile_seconds_since(before) == {}  # nothing compiled since
