"""Compiled optimizer steps launch their per-parameter updates as combo kernels, and still leave
every parameter and state tensor where eager's steps do."""

import copy
import re

import pytest
import torch
from torch import nn

import pipec


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(11, 6), nn.Linear(6, 10), nn.LayerNorm(10), nn.GELU(), nn.Linear(10, 3))


def _launches(tmp_path) -> list[str]:
    """The launches of the newest program compiled (SGD's first step, which creates its momentum
    buffers, is a program of its own)."""
    newest = max(tmp_path.glob("*.codegen.txt"), key=lambda p: p.stat().st_mtime_ns)
    return re.findall(r"= launch (\w+)\(", newest.read_text())


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=True),
    lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, foreach=False),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
], ids=["adamw", "adam-amsgrad-for-loop", "sgd-nesterov"])
def test_optimizer_steps_with_combo_kernels_follow_eager(make, tmp_path):
    model = _model()
    twin = copy.deepcopy(model)
    eager_opt, opt = make(model.parameters()), make(twin.parameters())
    step = pipec.compile(opt.step, dump_dir=str(tmp_path))
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        for p, q in zip(model.parameters(), twin.parameters()):
            p.grad = torch.randn(p.shape, generator=generator)
            q.grad = p.grad.clone()
        eager_opt.step()
        step()
    torch.testing.assert_close(dict(twin.named_parameters()), dict(model.named_parameters()))
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(opt.state[q], eager_opt.state[p])
    launches = _launches(tmp_path)
    assert any(name.startswith("pipec_combo_") for name in launches), launches
    assert len(launches) < len(list(model.parameters())), launches  # fewer launches than parameters


def test_combo_kernels_off_launches_a_kernel_per_parameter(tmp_path):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    pipec.compile(opt.step, dump_dir=str(tmp_path), combo_kernels=False)()
    launches = _launches(tmp_path)
    assert not any(name.startswith("pipec_combo_") for name in launches)
    assert len(launches) >= len(list(model.parameters())), launches


def test_explain_says_which_combo_runs_each_update():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()  # the momentum buffers exist: the compiled step is the steady one
    report = pipec.explain(opt.step)
    (graph,) = report.graphs
    runs = {row["name"]: row["runs_as"] for row in graph["kernels"]}
    assert runs and all(r.startswith("Triton, in pipec_combo_") for r in runs.values()), runs
    assert report.kernel_count == 1 and report.kernels[0][0] == "pipec_combo_0"
