"""The first call on a GPU compiles every launch's candidate configs at once (runner.py:
`ProgramRunner._precompile`, `compile_all`). On the CPU the launch is built but nothing is
compiled: CUDA and the kernel are stand-ins, and `compile_all` records the jobs it is given."""

import pytest
import torch

from pipec_ir import CompileOptions, LaunchConfig, LoadContext
from runtime_helpers import add_program

import pipec_runtime_cudagraph.runner as runner_module
from pipec_runtime_cudagraph.steps import LaunchStep
from pipec_runtime_cudagraph.launch import ProgramRunner

CONFIGS = (LaunchConfig(constants=(("BLOCK", 8),)), LaunchConfig(constants=(("BLOCK", 16),)),
           LaunchConfig(constants=(("BLOCK", 32),)))


class _Kernel:
    """Stands in for a Triton JIT function: only `warmup` (what compile jobs call) exists."""

    def warmup(self, *args, **kwargs):
        raise AssertionError("compile_all is recorded, not run, here")


@pytest.fixture
def runner_and_jobs(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    jobs = []
    monkeypatch.setattr(runner_module, "compile_all", lambda found, profile=None, workers=0, started=None: jobs.extend(found))

    def make(tune=True):
        program = add_program(n=100, configs=CONFIGS)
        runner = ProgramRunner(program, CompileOptions(runtime="launch", autotune=tune), LoadContext(tuning_cache=False))
        launch = LaunchStep(runner, program.steps[0], program.kernels[0], fn=_Kernel(),
                                       interpret=False, tune=tune)
        runner._launches["cpu"] = [launch]  # the device the stand-in tensors are made on
        return runner, launch, program
    return make, jobs


def test_every_candidate_config_is_compiled_before_the_first_run(runner_and_jobs, monkeypatch):
    make, jobs = runner_and_jobs
    runner, launch, _ = make()
    x, y = torch.randn(100), torch.randn(100)
    runner._precompile([x, y], (), torch.device("cpu"))
    assert [grid for _, _, _, grid, _ in jobs] == [(13,), (7,), (4,)]  # cdiv(100, BLOCK) for each config
    args = jobs[0][1]
    assert args[0] is x and args[1] is y  # the inputs themselves
    assert args[2].dtype == torch.float32 and args[2].numel() < 100  # the output: a small stand-in
    assert launch.config == CONFIGS[0]  # compiling left the launch's config alone


def test_a_config_chosen_before_is_the_only_one_compiled(runner_and_jobs, monkeypatch):
    make, jobs = runner_and_jobs
    runner, launch, program = make()
    runner.tuned[(program.kernels[0].name, ())] = 2
    assert launch.candidates((), torch.device("cpu")) == (CONFIGS[2],)
    runner._launches["cpu"] = [launch, launch]  # two launches of the kernel: two jobs to share the pool
    runner._precompile([torch.randn(100), torch.randn(100)], (), torch.device("cpu"))
    assert [kwargs["BLOCK"] for *_, kwargs in jobs] == [32, 32]


def test_without_autotuning_only_the_current_config_is_a_candidate(runner_and_jobs):
    """One config per launch and one launch: that one is compiled before the first run as well
    (so the compile-time profile shows it as Triton compilation, not as part of the run)."""
    make, jobs = runner_and_jobs
    runner, launch, _ = make(tune=False)
    assert launch.candidates((), torch.device("cpu")) == (CONFIGS[0],)
    runner._precompile([torch.randn(100), torch.randn(100)], (), torch.device("cpu"))
    assert [kwargs["BLOCK"] for *_, kwargs in jobs] == [8]


def test_nothing_is_compiled_for_the_interpreter():
    program = add_program(n=100, configs=CONFIGS)
    runner = ProgramRunner(program, CompileOptions(runtime="launch"))
    launch = LaunchStep(runner, program.steps[0], program.kernels[0], fn=_Kernel(), interpret=True,
                                   tune=False)
    assert launch.compile_jobs(CONFIGS, [], ()) == []


def test_each_new_size_bucket_compiles_once(monkeypatch):
    """Dynamic sizes: the first call of every size bucket compiles at once (new configs to time,
    new sizes to specialize for); a second call in the same bucket compiles nothing more."""
    from runtime_helpers import dynamic_add_program

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    seen = []
    monkeypatch.setattr(runner_module, "compile_all", lambda jobs, profile=None, workers=0, started=None: seen.append(len(jobs)))
    program = dynamic_add_program()
    runner = ProgramRunner(program, CompileOptions(runtime="launch", autotune=True), LoadContext(tuning_cache=False))
    launch = LaunchStep(runner, program.steps[0], program.kernels[0], fn=_Kernel(), interpret=False,
                                   tune=True)
    runner._launches["cpu"] = [launch, launch]
    for n in (100, 120, 300, 128):  # buckets 128, 128, 512, 128
        x = torch.randn(n)
        runner.precompile_once([x, x], (n,), torch.device("cpu"))
    assert len(seen) == 2 and all(count >= 2 for count in seen)


@pytest.mark.parametrize("cached", [True, False])
def test_a_warm_load_imports_only_the_first_kernel_it_would_compile(monkeypatch, cached):
    """At load (`_start_compiles`) the jobs are listed only once the first is known to need
    compiling: on a warm start (the first in Triton's cache) the other launches' kernel modules,
    which listing their jobs would import, stay unimported; on a cold one all are listed and sent."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(runner_module, "compiled_already", lambda job: cached)
    sent = []
    monkeypatch.setattr(runner_module, "start_in_workers", lambda jobs, size: sent.append(len(jobs)))
    program = add_program(n=100, configs=CONFIGS)
    runner = ProgramRunner(program, CompileOptions(runtime="launch", autotune=True),
                           LoadContext(tuning_cache=False, compile_workers=2))
    sent.clear()  # with a real GPU the constructor's own early compile sent the program's jobs: not this call's
    loads = []

    def launch(k):
        def load():
            loads.append(k)
            return _Kernel()
        return LaunchStep(runner, program.steps[0], program.kernels[0], fn=None, interpret=False, tune=True,
                          load=load)

    runner._launches["cpu"] = [launch(k) for k in range(3)]
    runner._start_compiles(torch.device("cpu"))
    if cached:
        assert loads == [0] and sent == []
    else:
        assert loads == [0, 1, 2] and sent == [3 * len(CONFIGS)]
