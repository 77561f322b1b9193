"""The collector is paused while pipec compiles (gc_pause.py), and only then."""

import gc

import pytest
import torch

import pipec
import pipec.pipeline
from pipec.gc_pause import gc_paused


def test_a_pause_restores_the_collector_as_it_was():
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with gc_paused():
            assert not gc.isenabled()
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the outer pause still holds
            raise RuntimeError("a compile failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a collector the caller turned off stays off
    finally:
        gc.enable()


def test_compiles_run_paused_and_calls_do_not(monkeypatch):
    """Every stage of the forward's and the backward's compile runs with the collector off (the
    backward's compile comes from AOTAutograd at the first backward, outside Dynamo's call of the
    backend); the compiled calls run with it on."""
    seen = []
    run_stage = pipec.pipeline.run_stage

    def recording(stage, *args, **kwargs):
        seen.append((stage.name, gc.isenabled()))
        return run_stage(stage, *args, **kwargs)

    monkeypatch.setattr(pipec.pipeline, "run_stage", recording)
    torch._dynamo.reset()
    lin = torch.nn.Linear(4, 3)
    f = pipec.compile(lambda x: torch.relu(lin(x)).sum(), cache="none")
    x = torch.randn(2, 4, requires_grad=True)
    f(x).backward()
    assert len(seen) == 8 and not any(enabled for _, enabled in seen), seen  # 4 stages x 2 graphs
    assert gc.isenabled()
    torch.testing.assert_close(x.grad, torch.autograd.grad(torch.relu(lin(x)).sum(), x)[0])
