"""The shipped tuning table (tuning_table.py): a decision it knows is taken without timing, the
tuning cache records what tables are learned from, and the exhaustive modes time everything.
On the CPU timing is faked and the GPU family is set by hand (as in test_runtime_buckets.py)."""

from __future__ import annotations

import json

import pytest
import torch

from pipec_ir import Buffer, CompileOptions, CompileProfile, LaunchConfig, LoadContext, Program, Step, make_attrs
from runtime_helpers import T, add_kernel

from pipec_runtime_cudagraph import autotune, tuning_table
from pipec_runtime_cudagraph.rounds import PRUNE_AFTER, ROUNDS
from pipec_runtime_cudagraph.launch import ProgramRunner
from pipec_runtime_cudagraph.tuning_table import TuningTable, body_features, coarse, feature_key, launch_features, pow2

CONFIGS = (LaunchConfig(constants=(("BLOCK", 64),)), LaunchConfig(constants=(("BLOCK", 128),)))


def add_program(n: int = 100) -> Program:
    return Program(
        name="add", inputs=(Buffer("x", T([n])), Buffer("y", T([n]))), outputs=("z",), buffers=(Buffer("z", T([n])),),
        kernels=(add_kernel("pipec_add_0", n, CONFIGS),), steps=(Step("launch", "pipec_add_0", ("x", "y"), ("z",)),))


# these take the CPU for an sm90 GPU; with a real GPU, CPU tensors run on it (runner.run_cpu_on_cuda)
# and the decisions they count are made for the real device too
no_real_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="fakes an sm90 GPU on a host without one")


@pytest.fixture()
def fake_gpu(monkeypatch, tmp_path):
    """Timing faked (BLOCK=128 wins), the CPU taken for an `sm90` GPU, the tables read from tmp_path;
    returns the list of timings made."""
    import triton.testing

    timed = []

    def fake_bench(fn, warmup=0, rep=0):
        fn()
        timed.append(1)
        return 0.5 if next(d for d in fn.__defaults__ if isinstance(d, dict))["BLOCK"] == 128 else 1.0

    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    monkeypatch.setattr(tuning_table, "gpu_family", lambda device: "sm90")
    monkeypatch.setattr(autotune, "gpu_family", lambda device: "sm90")
    monkeypatch.setattr(tuning_table, "TABLE_DIR", tmp_path / "tables")
    return timed


def run(program: Program, context: LoadContext, **options) -> ProgramRunner:
    runner = ProgramRunner(program, CompileOptions(runtime="launch").with_extra(**options), context)
    runner._plans["cpu"] = runner._build("cpu", tune=True)  # tune on the CPU: timing is faked
    x, y = torch.randn(100), torch.randn(100)
    torch.testing.assert_close(runner([x, y])[0], x + y)
    return runner


def write_table(tmp_path, entries: dict) -> None:
    (tmp_path / "tables").mkdir(exist_ok=True)
    (tmp_path / "tables" / "sm90.json").write_text(json.dumps(
        {"format": tuning_table.FORMAT, "entries": {k: {"pick": v} for k, v in entries.items()}}))


def test_a_timing_records_what_a_table_is_learned_from(fake_gpu, tmp_path):
    runner = run(add_program(), LoadContext(kernel_dir=str(tmp_path / "kernels")))
    (launch,) = runner._launches["cpu"]
    (path,) = (tmp_path / "kernels" / "tuning").glob("*.json")
    data = json.loads(path.read_text())
    assert data["chosen"] == 1 and data["family"] == "sm90"
    assert data["labels"] == ["BLOCK=64 warps=4 stages=1", "BLOCK=128 warps=4 stages=1"]
    assert data["features"] == launch_features(launch, ()) == {
        "kind": "launch", "configs": data["labels"], "sizes": [128], "dtypes": ["float32"] * 3,
        "body": body_features(launch.kernel.source)}
    assert ["load", 2] in data["features"]["body"] and ["store", 1] in data["features"]["body"]


@no_real_gpu
def test_a_decision_the_table_knows_is_not_timed(fake_gpu, tmp_path):
    probe = run(add_program(), LoadContext(tuning_cache=False))  # to read the launch's features
    fake_gpu.clear()
    (launch,) = probe._launches["cpu"]
    write_table(tmp_path, {feature_key(launch_features(launch, ())): "BLOCK=128 warps=4 stages=1"})

    profile = CompileProfile()
    context = LoadContext(kernel_dir=str(tmp_path / "kernels"), profile=profile)
    with profile.measure():
        runner = run(add_program(), context)
    assert fake_gpu == [] and runner.tuned == {("pipec_add_0", ()): 1}
    counts = profile.to_dict()["counts"]
    assert (counts["configs_from_table"], counts["kernels_timed"]) == (1, 0)
    assert not (tmp_path / "kernels" / "tuning").exists()  # a table's pick is not written as a timing

    # another size (128 -> 256 once rounded up) is another decision: timed
    fake_gpu.clear()
    runner = ProgramRunner(add_program(200), CompileOptions(runtime="launch"), LoadContext(tuning_cache=False))
    runner._plans["cpu"] = runner._build("cpu", tune=True)
    runner([torch.randn(200), torch.randn(200)])
    assert fake_gpu and runner.tuned == {("pipec_add_0", ()): 1}


@pytest.mark.parametrize("options", [{"max_autotune": True}, {"tuning_table": False}])
def test_exhaustive_modes_time_what_the_table_knows(fake_gpu, tmp_path, options):
    probe = run(add_program(), LoadContext(tuning_cache=False))
    (launch,) = probe._launches["cpu"]
    write_table(tmp_path, {feature_key(launch_features(launch, ())): "BLOCK=64 warps=4 stages=1"})
    fake_gpu.clear()
    runner = run(add_program(), LoadContext(tuning_cache=False), **options)
    assert fake_gpu and runner.tuned == {("pipec_add_0", ()): 1}  # timed: BLOCK=128 wins, not the table's 64
    # max-autotune times the clear loser (1.0 against 0.5 ms) in every round; default drops it after two
    rounds = ROUNDS if options.get("max_autotune") else PRUNE_AFTER
    assert len(fake_gpu) == 2 * rounds


def test_a_pick_that_is_not_a_candidate_is_timed(fake_gpu, tmp_path):
    probe = run(add_program(), LoadContext(tuning_cache=False))
    (launch,) = probe._launches["cpu"]
    write_table(tmp_path, {feature_key(launch_features(launch, ())): "BLOCK=4096 warps=8 stages=1"})
    fake_gpu.clear()
    runner = run(add_program(), LoadContext(tuning_cache=False))
    assert fake_gpu and runner.tuned == {("pipec_add_0", ()): 1}
    # and with autotune_configs=1 nothing is timed or looked up: the first config runs
    fake_gpu.clear()
    assert run(add_program(), LoadContext(tuning_cache=False), autotune_configs=1).tuned == {} and fake_gpu == []


@pytest.mark.parametrize("text", ["not json", '{"format": 99, "entries": {}}', '{"format": 1, "entries": [1]}',
                                  '{"format": 1}'])
def test_a_bad_table_is_an_empty_one(tmp_path, text):
    (tmp_path / "sm90.json").write_text(text)
    assert len(TuningTable.for_family("sm90", tmp_path)) == 0
    assert len(TuningTable.for_family("sm100", tmp_path)) == 0  # none shipped for that family
    assert len(TuningTable.for_family(None, tmp_path)) == 0  # off CUDA


def test_sizes_round_up_to_powers_of_two():
    assert [pow2(n) for n in (0, 1, 2, 3, 100, 128, 129, 4097)] == [0, 1, 2, 4, 128, 128, 256, 8192]


@no_real_gpu
def test_a_table_pick_that_does_not_run_here_is_timed_instead(fake_gpu, tmp_path, monkeypatch, caplog):
    """A pick learned on another kernel body may need more registers or shared memory than this
    one has: when it does not build or load, the candidates are timed as without a table."""
    import logging

    from pipec_runtime_cudagraph.steps import LaunchStep

    probe = run(add_program(), LoadContext(tuning_cache=False))
    (launch,) = probe._launches["cpu"]
    write_table(tmp_path, {feature_key(launch_features(launch, ())): "BLOCK=64 warps=4 stages=1"})
    fake_gpu.clear()
    tried = []

    def cannot_run(self, index, vals, symvals):
        tried.append(index)
        return "OutOfResources: out of resource: shared memory"

    monkeypatch.setattr(LaunchStep, "cannot_run", cannot_run)
    with caplog.at_level(logging.WARNING, logger="pipec.tuning"):
        runner = run(add_program(), LoadContext(tuning_cache=False))
    assert tried == [0] and fake_gpu and runner.tuned == {("pipec_add_0", ()): 1}  # timed: BLOCK=128 wins
    assert "does not run here" in caplog.text and not runner.memo.from_table


def test_a_table_answers_from_the_refined_features_first_then_the_coarse_ones():
    refined = {"kind": "launch", "configs": ["a", "b"], "sizes": [128], "dtypes": ["float32"],
               "body": [["load", 2], ["store", 1]]}
    other_body = dict(refined, body=[["load", 3], ["store", 1], ["sum", 1]])
    table = TuningTable({feature_key(refined): "a", feature_key(coarse(refined)): "b"})
    assert table.pick(refined) == "a"  # its own body's pick
    assert table.pick(other_body) == "b"  # a body no run has seen: the coarse pick
    assert TuningTable({feature_key(coarse(refined)): "b"}).pick(refined) == "b"  # a table learned before bodies
    assert coarse(coarse(refined)) is None


def choice_program(n: int = 100) -> Program:
    """z = x + y by either of two alternatives of one choice group ("a", the default, or "b")."""
    def step(kernel, alternative, default=False):
        attrs = make_attrs(choice="g", alternative=alternative, **({"default": True} if default else {}))
        return Step("launch", kernel, ("x", "y"), ("z",), attrs)
    return Program(
        name="choice", inputs=(Buffer("x", T([n])), Buffer("y", T([n]))), outputs=("z",), buffers=(Buffer("z", T([n])),),
        kernels=(add_kernel("pipec_add_a", n, CONFIGS), add_kernel("pipec_add_b", n, CONFIGS)),
        steps=(step("pipec_add_a", "a", default=True), step("pipec_add_b", "b")))


def _compiled_kernels(runner, device) -> set[str]:
    """The kernels whose launches the runner's compile-ahead lists for `device` (on the CPU
    plan: the stand-in launches are the same objects)."""
    skipped = runner._unpicked_launches((), device)
    return {launch.kernel.name for launch in runner._launches["cpu"] if id(launch) not in skipped}


@no_real_gpu
def test_compiles_ahead_skip_the_alternatives_a_known_pick_rules_out(fake_gpu, tmp_path):
    """Only the alternative that will run is compiled: the default where nothing is tuned, the
    forced one, one the memo (or table, or cache) knows; every one where the pick needs timing."""
    context = LoadContext(kernel_dir=str(tmp_path / "k"), tuning_cache=None, profile=CompileProfile())
    runner = ProgramRunner(choice_program(), CompileOptions(runtime="launch"), context)
    assert _compiled_kernels(runner, torch.device("cpu")) == {"pipec_add_a"}  # untuned on the CPU: the default
    forced = ProgramRunner(choice_program(), CompileOptions(runtime="launch").with_extra(choice="b"), context)
    assert _compiled_kernels(forced, torch.device("cpu")) == {"pipec_add_b"}
    runner._plans["cpu"] = runner._build("cpu", tune=True)  # a tuned plan (the runner's launches are its)
    runner._plans["cuda"] = runner._plans["cpu"]  # the same steps, asked about as for a GPU
    cuda = torch.device("cuda")
    assert _compiled_kernels(runner, cuda) == {"pipec_add_a", "pipec_add_b"}  # no table, no memo: timed
    group = next(step for step, _ in runner._plans["cpu"] if hasattr(step, "known_pick"))
    runner.memo.choices[group._keys(cuda, ())[1]] = ("b", {}, True)
    assert _compiled_kernels(runner, cuda) == {"pipec_add_b"}
    assert not group.chosen and runner.profile.counts.get("choices_from_table", 0) == 0  # asking records nothing


def test_a_cuda_graph_runner_asks_for_graph_clock_picks_from_its_start(monkeypatch, tmp_path):
    """The compile-ahead at load asks for the picks under the runner's choice timer: a CUDA Graph
    program's runner is built with the graph clock, not switched to it after the compiles start
    (the table keys the two apart; a wall-clock pick would compile the wrong alternative)."""
    from pipec_runtime_cudagraph.cudagraph import CudaGraphProgram
    from pipec_runtime_cudagraph.runner import ProgramRunner as Runner

    timers = []
    monkeypatch.setattr(Runner, "_start_compiles", lambda self, device: timers.append(self.choice_timer))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the load path of a GPU host
    monkeypatch.setattr("pipec_runtime_cudagraph.runner.warm", lambda size: None)
    context = LoadContext(kernel_dir=str(tmp_path / "k"), tuning_cache=None, profile=CompileProfile())
    CudaGraphProgram(choice_program(), CompileOptions(runtime="cudagraph"), context)
    ProgramRunner(choice_program(), CompileOptions(runtime="launch"), context)
    assert timers == ["graph", "wall"]


def test_a_choice_group_is_refined_by_its_exact_shapes(fake_gpu, tmp_path):
    """Two sizes of one power of two share a choice group's coarse key but not its refined one:
    a pick learned on one size does not serve the other unless every size agreed (the coarse
    entry), and a table learned before the refinement still answers through the coarse key."""
    def features(n):
        runner = ProgramRunner(choice_program(n), CompileOptions(runtime="launch"), LoadContext(tuning_cache=False))
        group = next(step for step, _ in runner._build("cpu", tune=True) if hasattr(step, "known_pick"))
        return tuning_table.choice_features(runner, group.alternatives, (), "events")
    small, large = features(96), features(100)
    assert coarse(small) == coarse(large) and small != large
    assert small["exact"] == ["float32[96]"] and large["exact"] == ["float32[100]"]
    assert "float32[128]" in json.dumps(small["alternatives"])  # the coarse shapes, rounded
    table = TuningTable({feature_key(large): "b", feature_key(coarse(large)): "a"})
    assert table.pick(large) == "b" and table.pick(small) == "a"
    assert TuningTable({feature_key(coarse(large)): "a"}).pick(small) == "a"  # a table learned before
