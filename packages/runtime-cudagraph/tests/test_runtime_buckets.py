"""Size buckets: autotuned configs per (kernel, bucket), CUDA Graph keys and padding, the
recompile budget of graph re-records. All on CPU: tuning and graph recording are faked."""

from __future__ import annotations

import warnings

import pytest
import torch

from pipec_ir import (Buffer, CompileOptions, LaunchConfig, LoadContext, Program, RecompileBudget, RecompileLimitError,
                      RecompileLimitWarning, Ref, Size, Step, SymbolRange, bucket_of, make_attrs)
from pipec_ir.symbolic import size_symbol
from runtime_helpers import T, add_kernel, dynamic_add_program

from pipec_runtime_cudagraph.buckets import GraphTable, PadPolicy, budget_from
from pipec_runtime_cudagraph.launch import ProgramRunner
from pipec_runtime_cudagraph.rounds import PRUNE_AFTER

CONFIGS = (LaunchConfig(constants=(("BLOCK", 64),)), LaunchConfig(constants=(("BLOCK", 128),)))
# do_bench calls per tuning: each config once per round until the clear loser is dropped, which
# leaves the winner alone (rounds.py)
TIMINGS = len(CONFIGS) * PRUNE_AFTER


def _fake_bench(benched):
    """A do_bench stand-in (the CPU has no GPU timer) that records each timing."""
    def fake_bench(fn, warmup=0, rep=0):
        fn()
        benched.append(1)
        constants = next(d for d in fn.__defaults__ if isinstance(d, dict))  # the launch's kwargs
        return 0.0 if constants["BLOCK"] == 128 else 1.0  # the second config "wins"
    return fake_bench


@pytest.fixture()
def options():
    return CompileOptions(runtime="launch")


@pytest.fixture()
def context(tmp_path):
    """A loaded model's context: its own tuning memo, kernels and tuning cache under tmp_path."""
    return LoadContext(kernel_dir=str(tmp_path / "kernels"))


def test_bucket_of_policies():
    assert [bucket_of(n) for n in (0, 1, 2, 3, 17, 32, 33, 1000)] == [0, 1, 2, 4, 32, 32, 64, 1024]
    assert bucket_of(1000, upper=1000) == 1000  # never past the symbol's upper bound
    assert [bucket_of(n, "exact") for n in (3, 17, 1000)] == [3, 17, 1000]
    with pytest.raises(ValueError, match="bucket policy"):
        bucket_of(3, "log")


def tunable_add() -> Program:
    s0 = size_symbol("s0")
    return Program(
        name="dyn_add_tuned", inputs=(Buffer("x", T([s0])), Buffer("y", T([s0]))), outputs=("out",),
        buffers=(Buffer("out", T([s0])),), kernels=(add_kernel("pipec_add_t", s0, CONFIGS),),
        steps=(Step("launch", "pipec_add_t", ("x", "y"), ("out",)),),
        symbols=(SymbolRange("s0", 0, None, 64),), pad_symbols=("s0",))


@pytest.mark.parametrize("policy, tunes", [("pow2", [1, 1, 2, 2]), ("exact", [1, 2, 3, 3])])
def test_autotune_once_per_bucket(options, context, monkeypatch, policy, tunes):
    """A new size inside a known bucket is not re-tuned (do_bench is faked: CPU has no timer)."""
    import triton.testing

    benched = []
    monkeypatch.setattr(triton.testing, "do_bench", _fake_bench(benched))
    runner = ProgramRunner(tunable_add(), options.with_extra(bucket=policy), context)
    runner._plans["cpu"] = runner._build("cpu", tune=True)
    seen = []
    for n in (17, 20, 40, 20):
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(runner([x, y])[0], x + y)
        seen.append(len(runner.tuned))
    assert seen == tunes
    assert set(runner.tuned.values()) == {1}
    if policy == "pow2":
        assert set(runner.tuned) == {("pipec_add_t", (32,)), ("pipec_add_t", (64,))}
    assert len(benched) == TIMINGS * tunes[-1]


def _renamed_add() -> Program:
    """`tunable_add` with its kernel under another name: the same body (the next layer)."""
    program = tunable_add()
    kernel = program.kernels[0]
    renamed = type(kernel)(**{**kernel.__dict__, "name": "pipec_add_u",
                              "source": kernel.source.replace("pipec_add_t", "pipec_add_u")})
    return type(program)(**{**program.__dict__, "kernels": (renamed,),
                            "steps": (Step("launch", "pipec_add_u", ("x", "y"), ("out",)),)})


def test_identical_kernels_are_tuned_once_per_model(options, context, monkeypatch):
    """The same kernel body under another name (the next layer, another graph of the model, all
    loaded with the model's LoadContext) reuses the timing: a 12-layer model tunes each distinct
    kernel once."""
    import triton.testing

    benched = []
    monkeypatch.setattr(triton.testing, "do_bench", _fake_bench(benched))
    first = ProgramRunner(tunable_add(), options, context)
    second = ProgramRunner(_renamed_add(), options, context)
    for runner in (first, second):
        runner._plans["cpu"] = runner._build("cpu", tune=True)
        x, y = torch.randn(20), torch.randn(20)
        torch.testing.assert_close(runner([x, y])[0], x + y)
    assert len(benched) == TIMINGS  # timed for the first runner only
    assert first.tuned == {("pipec_add_t", (32,)): 1} and second.tuned == {("pipec_add_u", (32,)): 1}


def test_tuning_memos_belong_to_the_loaded_model(options, monkeypatch):
    """Two models loaded with contexts of their own (and no tuning cache on disk) share nothing:
    what one timed is not in the other's memo, so each times its kernel. (The picks used to be
    a process-wide table that every later model in the process read.)"""
    import triton.testing

    benched = []
    monkeypatch.setattr(triton.testing, "do_bench", _fake_bench(benched))
    contexts = [LoadContext(tuning_cache=False), LoadContext(tuning_cache=False)]
    runners = [ProgramRunner(tunable_add(), options, contexts[0]), ProgramRunner(_renamed_add(), options, contexts[1])]
    for runner in runners:
        runner._plans["cpu"] = runner._build("cpu", tune=True)
        x, y = torch.randn(20), torch.randn(20)
        torch.testing.assert_close(runner([x, y])[0], x + y)
    assert len(benched) == 2 * TIMINGS
    assert runners[0].memo is not runners[1].memo and all(len(r.memo.configs) == 1 for r in runners)


def test_tuning_memo_keeps_its_most_recent_entries():
    from pipec_runtime_cudagraph.autotune import MEMO_KEY, TuningMemo

    memo = LoadContext().memo(MEMO_KEY, TuningMemo)
    memo.MAX_ENTRIES = 2
    for k in ("a", "b", "a", "c"):  # storing "a" again makes it the most recent
        memo.put(memo.configs, (k,), 0)
    assert list(memo.configs) == [("a",), ("c",)]


def test_pad_policy_keys_and_padded_run(options):
    runner = ProgramRunner(tunable_add(), options)
    pad = PadPolicy(runner, "pow2")
    assert pad.graph_values((17,)) == pad.graph_values((20,)) == (32,)
    assert pad.graph_values((1,)) == (1,)
    assert PadPolicy(runner, "exact").graph_values((17,)) == (17,)
    x, y = torch.randn(17), torch.randn(17)
    padded = pad.padded_inputs([x, y], (32,))
    assert padded[0].shape == (32,) and torch.equal(padded[0][:17], x) and not padded[0][17:].any()
    (out,) = pad.run_padded([x, y], (17,), torch.device("cpu"))
    assert out.shape == (17,)
    torch.testing.assert_close(out, x + y)
    pad.copy_inputs(padded, [y, x])  # a replay's copy: into the prefix
    assert torch.equal(padded[0][:17], y)


def test_symbols_without_padding_proof_keep_exact_keys(options):
    runner = ProgramRunner(dynamic_add_program(), options)  # pad_symbols=(): nothing proven
    assert PadPolicy(runner, "pow2").graph_values((17,)) == (17,)


def test_graph_table_same_bucket_no_new_entry_and_budget():
    budget = RecompileBudget(1, name="m")
    table = GraphTable(budget, "prog")
    made = []

    def make(tag):
        return lambda: made.append(tag) or tag

    assert table.record((None, (32,)), make("a")) == "a"  # the first graph is free
    assert table.record((None, (32,)), make("b")) == "a"  # same bucket: no new entry, no charge
    assert len(table) == 1 and budget.spent == 0
    assert table.record((None, (64,)), make("c")) == "c"  # a re-record: charged
    assert budget.spent == 1
    with pytest.warns(RecompileLimitWarning, match="recompile_limit=1"):
        assert table.record((None, (128,)), make("d")) is None  # over budget: plain launches
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        assert table.record((None, (256,)), make("e")) is None
    assert made == ["a", "c"] and len(table) == 2


def test_graph_table_strict_budget_raises():
    table = GraphTable(RecompileBudget(0, strict=True, name="m"), "prog")
    table.record((None, (1,)), lambda: "a")
    with pytest.raises(RecompileLimitError, match="fullgraph"):
        table.record((None, (2,)), lambda: "b")


def test_budget_comes_from_the_load_context():
    shared = RecompileBudget(3)
    assert budget_from(LoadContext(budget=shared), CompileOptions().with_extra(recompile_limit=5), "p") is shared
    own = budget_from(LoadContext(), CompileOptions(fullgraph=True).with_extra(recompile_limit=5), "p")
    assert (own.limit, own.strict) == (5, True)
    assert budget_from(LoadContext(), CompileOptions(), "p").limit == 8


def test_symbolic_extern_arguments_are_evaluated(options):
    """Size leaves in extern args (a view step with symbolic sizes) use the call's symbol values."""
    s0, s1 = size_symbol("s0"), size_symbol("s1")
    prog = Program(
        name="views", inputs=(Buffer("x", T([s0, s1, 4])),), outputs=("v", "t"),
        buffers=(Buffer("v", T([s0 * s1, 4])), Buffer("t", T([s0, 2, 4]))),
        kernels=(), steps=(
            Step("extern", "aten.reshape.default", ("x",), ("v",),
                 make_attrs(args=(Ref("x"), (Size("s0*s1"), 4)), kwargs=())),
            Step("extern", "aten.slice.Tensor", ("x",), ("t",),
                 make_attrs(args=(Ref("x"), 1, Size("s1 - 2"), Size("s1"), 1), kwargs=())),
        ), symbols=(SymbolRange("s0", 0, None, 2), SymbolRange("s1", 0, None, 3)))
    run = ProgramRunner(prog, options)
    for shape in ((2, 3, 4), (5, 7, 4)):
        x = torch.randn(shape)
        v, t = run([x])
        torch.testing.assert_close(v, x.reshape(-1, 4))
        torch.testing.assert_close(t, x[:, -2:])


def test_runner_rejects_unknown_bucket_policy(options):
    from pipec_runtime_cudagraph.launch import ProgramLoadError

    with pytest.raises(ProgramLoadError, match="bucket policy"):
        ProgramRunner(tunable_add(), options.with_extra(bucket="log"))


def test_sizes_from_size_leaves_count_as_used_symbols(options):
    prog = Program(
        name="unbound", inputs=(Buffer("x", T([4])),), outputs=("v",), buffers=(Buffer("v", T([4])),),
        kernels=(), steps=(Step("extern", "aten.reshape.default", ("x",), ("v",),
                                make_attrs(args=(Ref("x"), (Size("s9"),)), kwargs=())),),
        symbols=(SymbolRange("s9", 0, None, 4),))
    from pipec_runtime_cudagraph.launch import ProgramLoadError

    with pytest.raises(ProgramLoadError, match="s9"):
        ProgramRunner(prog, options)


def test_tuning_results_are_kept_on_disk_for_the_next_process(options, tmp_path, monkeypatch):
    """A fresh model (a new LoadContext: an empty tuning memo, as in a new process) reads the
    choice back instead of timing; a damaged file is ignored and rewritten; tuning_cache=False
    neither reads nor writes."""
    import triton.testing

    benched = []
    monkeypatch.setattr(triton.testing, "do_bench", _fake_bench(benched))

    def run_once(tuning_cache=True):
        context = LoadContext(kernel_dir=str(tmp_path / "kernels"), tuning_cache=tuning_cache)
        runner = ProgramRunner(tunable_add(), options, context)
        runner._plans["cpu"] = runner._build("cpu", tune=True)
        x, y = torch.randn(20), torch.randn(20)
        torch.testing.assert_close(runner([x, y])[0], x + y)
        return runner

    first = run_once()
    assert len(benched) == TIMINGS and first.tuned == {("pipec_add_t", (32,)): 1}
    files = list((first.tuning_cache.directory).glob("*.json"))
    assert len(files) == 1
    assert run_once().tuned == {("pipec_add_t", (32,)): 1}
    assert len(benched) == TIMINGS  # read back, not timed
    files[0].write_text('{"chosen": 7}')  # out of range for 2 configs: ignored, re-timed
    run_once()
    assert len(benched) == 2 * TIMINGS
    run_once(tuning_cache=False)
    assert len(benched) == 3 * TIMINGS


def test_autotune_configs_limits_the_timing(options, monkeypatch):
    import triton.testing

    benched = []
    monkeypatch.setattr(triton.testing, "do_bench", _fake_bench(benched))
    runner = ProgramRunner(tunable_add(), options.with_extra(autotune_configs=1), LoadContext(tuning_cache=False))
    runner._plans["cpu"] = runner._build("cpu", tune=True)
    x, y = torch.randn(20), torch.randn(20)
    torch.testing.assert_close(runner([x, y])[0], x + y)
    assert benched == [] and runner.tuned == {}  # the first config, untimed
    with pytest.raises(Exception, match="autotune_configs must be a positive integer"):
        ProgramRunner(tunable_add(), options.with_extra(autotune_configs=0))
