"""Persistent TMA launch configs: the runtime caps their programs at the GPU's SM count
(tma.py). On the CPU the launch is built but not run: CUDA, the SM count and the kernel (an
add kernel with a TMA config, standing in for the persistent template) are stand-ins."""

import torch

from pipec_ir import CompileOptions, LaunchConfig
from runtime_helpers import add_program

import pipec_runtime_cudagraph.steps as steps_module
from pipec_runtime_cudagraph.launch import ProgramRunner
from pipec_runtime_cudagraph.tma import persistent_grid


def test_persistent_grid_keeps_a_grid_that_fits_and_shrinks_one_that_does_not():
    assert persistent_grid((22, 6), 132) == (22, 6)  # codegen's grid on an H200
    assert persistent_grid((22, 6), 114) == (114, 1)  # an H100 PCIe: one wave, not two
    assert persistent_grid((3,), 4) == (3,)
    assert persistent_grid((64, 2, 1), 78) == (78, 1, 1)


def test_a_tma_config_launches_at_most_one_program_per_sm(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(steps_module, "sm_count", lambda: 4)
    monkeypatch.setattr(steps_module, "ensure_allocator", lambda: None)  # no CUDA allocator on the CPU
    pointer = LaunchConfig(constants=(("BLOCK", 8), ("TMA", 0)))
    tma = LaunchConfig(constants=(("BLOCK", 8), ("TMA", 1)))
    program = add_program(n=100, configs=(pointer, tma))
    runner = ProgramRunner(program, CompileOptions(runtime="launch"))
    launch = steps_module.LaunchStep(runner, program.steps[0], program.kernels[0], fn=None, interpret=False,
                                   tune=False)
    assert launch.dims == ((100,), (13,))  # configs[0]: cdiv(100, 8) programs, one block each
    launch.set_config(tma)
    assert launch.dims == ((100,), (4,))  # 13 blocks, 4 SMs: 4 programs walk them
    interpreted = steps_module.LaunchStep(runner, program.steps[0], program.kernels[0], fn=None, interpret=True,
                                        tune=False)
    interpreted.set_config(tma)
    assert interpreted.dims == ((100,), (13,))  # the interpreter runs codegen's grid


class _Recorder:
    """Stands in for a compiled kernel: `fn[grid](*args, **kwargs)` records the call."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
            torch.add(args[0], args[1], out=args[2])  # what the add kernel writes
        return launch


def test_a_kernel_with_only_tma_configs_gets_misaligned_inputs_copied(monkeypatch):
    """The Gluon ping-pong GEMM has one config, persistent TMA, with a register cap: the runtime
    passes the cap as Triton's `maxnreg`, and for an input that is not 16-byte aligned (no
    pointer config to fall back on) launches on an aligned copy of it; a misaligned output is
    written on aligned memory and copied back."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(steps_module, "sm_count", lambda: 4)
    monkeypatch.setattr(steps_module, "ensure_allocator", lambda: None)
    only = LaunchConfig(constants=(("BLOCK", 8), ("TMA", 1), ("MAXNREG", 168)), num_warps=4)
    program = add_program(n=100, configs=(only,))
    runner = ProgramRunner(program, CompileOptions(runtime="launch"))
    kernel = _Recorder()
    launch = steps_module.LaunchStep(runner, program.steps[0], program.kernels[0], fn=kernel, interpret=False,
                                   tune=False)
    assert launch.kwargs["maxnreg"] == 168 and launch.kwargs["MAXNREG"] == 168
    storage = torch.arange(101, dtype=torch.float32)
    shifted, aligned, out = storage[1:], torch.ones(100), torch.empty(100)
    assert shifted.data_ptr() % 16 and not aligned.data_ptr() % 16
    launch.run_misaligned([shifted, aligned, out], ())
    (grid, args, kwargs), = kernel.calls
    assert grid == (4,) and args[0].data_ptr() % 16 == 0 and torch.equal(args[0], shifted)
    assert args[1] is aligned and args[2] is out and args[3:] == (100,) and kwargs["maxnreg"] == 168
    torch.testing.assert_close(out, shifted + 1)
    # a misaligned output (the runner allocates its outputs aligned; say this one is not): written
    # on aligned memory, then copied back
    launch.maybe_unaligned = (0, 1, 2)
    shifted_out = torch.empty(101)[1:]
    launch.run_misaligned([aligned, aligned, shifted_out], ())
    assert kernel.calls[-1][1][2].data_ptr() % 16 == 0
    torch.testing.assert_close(shifted_out, aligned * 2)
