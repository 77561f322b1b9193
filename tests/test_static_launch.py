"""Kernels launched through torch's C++ launcher (runtime static_launch.py) end to end on the GPU:
a training step and a CUDA Graph replay compute what eager does, with every kernel the launcher
can describe taking it."""

import pytest
import torch

import pipec

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="launches need the GPU machine")


class Block(torch.nn.Module):
    """layer_norm, a GEMM with a GELU epilogue, softmax over rows and a residual: row kernels,
    pointwise kernels and a GEMM template, each with its own argument list."""

    def __init__(self, d=256):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        return torch.softmax(h, dim=-1) * 3.0 + x


def _step(fn, model, x):
    for p in model.parameters():
        p.grad = None
    x = x.detach().requires_grad_()
    out = fn(x)
    out.square().sum().backward()
    return [out, x.grad] + [p.grad for p in model.parameters()]


@cuda
@pytest.mark.parametrize("static", [True, False], ids=["static", "triton"])
def test_gpu_training_step_matches_eager(static, monkeypatch):
    from pipec_runtime_cudagraph import fastlaunch, static_launch

    bound = []  # what each launcher binding got from the C++ launcher (None: Triton's launcher)
    ask = fastlaunch.static_launch_call
    monkeypatch.setattr(fastlaunch, "static_launch_call", lambda *a: bound.append(ask(*a)) or bound[-1])

    if static and static_launch.static_launcher_impl() is None:
        pytest.skip("torch has no C++ Triton launcher")
    torch.manual_seed(0)
    model = Block().cuda()
    x = torch.randn(4, 100, 256, device="cuda")
    want = _step(model, model, x)
    # launch_store=False: launches an earlier run recorded (this test on this machine before) would
    # bind through the store and never ask the launcher being counted
    fn = pipec.compile(model, static_launch=static, launch_store=False)
    for _ in range(3):  # the second call onwards runs the specialized run with bound launchers
        got = _step(fn, model, x)
    torch.cuda.synchronize()
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=2e-3, rtol=2e-3)
    # nothing in this block needs scratch memory, clusters or descriptors; static_launch=False never asks
    assert (len(bound) > 0 and None not in bound) if static else not bound, bound


@cuda
def test_gpu_cuda_graph_replays_static_launches():
    from pipec_runtime_cudagraph import static_launch

    if static_launch.static_launcher_impl() is None:
        pytest.skip("torch has no C++ Triton launcher")
    torch.manual_seed(1)
    model = Block().cuda().eval()
    fn = pipec.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(2, 64, 256, device="cuda")
            torch.testing.assert_close(fn(x), model(x), atol=2e-3, rtol=2e-3, msg=lambda m, i=i: f"call {i}: {m}")


@pytest.mark.parametrize("option, env", [("static_launch", "PIPEC_STATIC_LAUNCH"),
                                         ("launch_store", "PIPEC_LAUNCH_STORE")])
def test_the_option_is_a_bool_and_the_environment_turns_it_off(monkeypatch, option, env):
    from pipec.options import make_options

    with pytest.raises(ValueError, match=f"{option} must be True or False"):
        pipec.compile(lambda x: x + 1, **{option: "no"})
    assert make_options().get(option, True) is True
    monkeypatch.setenv(env, "0")
    assert make_options().get(option) is False
    assert make_options(**{option: True}).get(option) is True


_WARM_SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, {tests!r})
import pipec
from test_static_launch import Block, _step
torch.manual_seed(0)
model = Block().cuda()
x = torch.randn(4, 100, 256, device="cuda")
want = _step(model, model, x)
fn = pipec.compile(model)
errors = []
for _ in range(3):
    got = _step(fn, model, x)
    torch.cuda.synchronize()
    errors.append(max(float((g - w).abs().max()) for g, w in zip(got, want)))
with torch.no_grad():
    y = torch.randn(2, 64, 256, device="cuda")
    errors.append(float((pipec.compile(model.eval(), mode="reduce-overhead")(y) - model(y)).abs().max()))
print(json.dumps({{"errors": errors, "imported": sorted(m for m in sys.modules if m.startswith("pipec_kernel_"))}}))
"""


@cuda
def test_gpu_a_new_process_launches_recorded_kernels_without_importing_them(tmp_path):
    """The launch store (runtime launch_store.py): a second process with the same kernel directory
    (and pipec's and AOTAutograd's caches) runs a training step and a CUDA Graph replay from the
    recorded cubins, matching eager, importing at most half the kernel modules the first process did
    (none, where torch's launcher describes every kernel); Triton's cache is new."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from pipec_runtime_cudagraph import static_launch

    if static_launch.static_launcher_impl() is None:
        pytest.skip("torch has no C++ Triton launcher")
    script = _WARM_SCRIPT.format(tests=str(Path(__file__).parent))
    env = {**os.environ, "PIPEC_KERNEL_DIR": str(tmp_path / "kernels"), "PIPEC_CACHE_DIR": str(tmp_path / "cache"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    runs = []
    for n in range(2):
        env["TRITON_CACHE_DIR"] = str(tmp_path / f"triton{n}")
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert list((tmp_path / "kernels" / "launches").glob("*.cubin"))
    cold, warm = runs
    assert cold["imported"], "the first process compiles its kernels"
    # kernels torch's launcher cannot describe (host-side descriptors, clusters) are imported again
    assert len(warm["imported"]) <= len(cold["imported"]) // 2, (cold["imported"], warm["imported"])
    for run in runs:
        assert max(run["errors"]) < 5e-3, run["errors"]
