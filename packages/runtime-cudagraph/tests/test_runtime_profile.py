"""The runtime's share of the compile-time profile (pipec_ir.CompileProfile): the kernels it loads,
the configs it times and the first run, recorded into the LoadContext's `profile`.
On the CPU timing is faked (no GPU timer), as in test_runtime_buckets.py."""

from __future__ import annotations

import pytest
import torch

from pipec_ir import Buffer, CompileOptions, CompileProfile, LaunchConfig, LoadContext, Program, Step
from runtime_helpers import T, add_kernel

from pipec_runtime_cudagraph.launch import ProgramRunner
from pipec_runtime_cudagraph.rounds import PRUNE_AFTER

CONFIGS = (LaunchConfig(constants=(("BLOCK", 64),)), LaunchConfig(constants=(("BLOCK", 128),)))


def two_adds() -> Program:
    """x + y, then that + y, by two kernels with the same body under two names (two layers)."""
    return Program(
        name="two_adds", inputs=(Buffer("x", T([100])), Buffer("y", T([100]))), outputs=("z",),
        buffers=(Buffer("t", T([100])), Buffer("z", T([100]))),
        kernels=(add_kernel("pipec_add_a", 100, CONFIGS), add_kernel("pipec_add_b", 100, CONFIGS)),
        steps=(Step("launch", "pipec_add_a", ("x", "y"), ("t",)), Step("launch", "pipec_add_b", ("t", "y"), ("z",))))


def test_loads_tuning_and_the_first_run_are_recorded(tmp_path, monkeypatch):
    import triton.testing

    timed = []

    def fake_bench(fn, warmup=0, rep=0):  # the second config "wins"
        fn()
        timed.append(1)
        return 0.0 if next(d for d in fn.__defaults__ if isinstance(d, dict))["BLOCK"] == 128 else 1.0

    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    profile = CompileProfile()
    context = LoadContext(profile=profile, kernel_dir=str(tmp_path), tuning_cache=False)
    x, y = torch.randn(100), torch.randn(100)
    with profile.measure():
        runner = ProgramRunner(two_adds(), CompileOptions(runtime="launch"), context)
        runner._plans["cpu"] = runner._build("cpu", tune=True)  # tune on the CPU: timing is faked
        torch.testing.assert_close(runner([x, y])[0], x + y + y)
    runner([x, y])  # after the window: recorded nowhere
    data = profile.to_dict()
    counts, seconds = data["counts"], data["seconds"]
    # two kernels, one body: loaded twice, timed once (the second layer reuses the first's pick)
    assert (counts["kernels"], counts["unique_kernels"]) == (2, 1)
    assert (counts["kernels_timed"], counts["configs_tried"]) == (1, len(CONFIGS))
    assert len(timed) == len(CONFIGS) * PRUNE_AFTER  # then the clear loser is dropped (rounds.py)
    # the interpreter compiles nothing; a GPU host runs CPU tensors' kernels on the GPU (interpreter.py)
    assert (counts["triton_compiles"] > 0) == torch.cuda.is_available()
    assert seconds["autotune"] > 0 and seconds["first_run"] > 0
    assert all(s >= 0 for s in seconds.values())
    assert sum(seconds.values()) == pytest.approx(data["wall_s"])


def test_without_a_profile_nothing_is_kept(tmp_path):
    """A runner without a profile records into a private one that no window ever opens."""
    runner = ProgramRunner(two_adds(), CompileOptions(runtime="launch"), LoadContext(kernel_dir=str(tmp_path)))
    x, y = torch.randn(100), torch.randn(100)
    torch.testing.assert_close(runner([x, y])[0], x + y + y)
    assert runner.profile.to_dict() == {} and not runner.first_call_pending
