"""PIPEC_LOGS (logs.py): each artifact prints what its stage decided, on stderr; the same names
under torch's logging state (TORCH_LOGS, torch._logging.set_logs) turn them on too."""

from __future__ import annotations

import logging

import pytest
import torch

import pipec
from pipec import logs


@pytest.fixture(autouse=True)
def logs_off(monkeypatch):
    """Every test starts and ends with no artifact on (configure_logs keeps state between calls)."""
    monkeypatch.delenv(logs.ENV, raising=False)
    logs.configure_logs({})
    yield
    logs.configure_logs({})


def test_parse():
    assert logs.parse("fusion, +output_code") == ({"fusion", "output_code"}, [])
    assert logs.parse("all")[0] == set(logs.ARTIFACTS)
    assert logs.parse("fusion,fuson") == ({"fusion"}, ["fuson"])
    assert logs.parse("") == (set(), [])


def test_unknown_name_is_a_warning_not_an_error():
    with pytest.warns(UserWarning, match="PIPEC_LOGS: unknown name.*fuson"):
        assert logs.configure_logs({"PIPEC_LOGS": "fuson,tuning"}) == {"tuning"}


def with_break(x):
    y = torch.relu(x) * 2
    torch._dynamo.graph_break()
    return torch.exp(y) + 1


def test_fusion_output_code_and_graph_breaks(monkeypatch, capsys):
    monkeypatch.setenv(logs.ENV, "fusion,output_code,graph_breaks")
    x = torch.randn(3, 5)
    torch.testing.assert_close(pipec.compile(with_break)(x), with_break(x))
    err = capsys.readouterr().err
    assert "[pipec.fusion] graph with_break_0: 1 kernels" in err
    assert "kernel pipec_fused_relu_mul_0 (pointwise): relu, mul" in err
    assert "fused (vertical" in err
    assert "[pipec.output_code] Output code of graph with_break_1:" in err
    assert "@triton.jit" in err and "def pipec_fused_exp_add_0(" in err
    # the break, with its reason and the line in this file
    assert "[pipec.graph_breaks] graph with_break_0 ends at a graph break:" in err
    assert "test_pipec_logs.py:" in err


def test_rejected_fusions_are_logged_with_their_reason(monkeypatch, capsys):
    monkeypatch.setenv(logs.ENV, "fusion")

    def relu_twice(x):
        return torch.relu(x) * 2

    x = torch.randn(3, 5)
    torch.testing.assert_close(pipec.compile(relu_twice, fusion="none")(x), relu_twice(x))
    err = capsys.readouterr().err
    assert "not fused: relu + mul: heuristics: policy 'none' does not fuse" in err, err


def test_nothing_is_printed_when_not_asked(capsys):
    x = torch.randn(3, 5)
    torch.testing.assert_close(pipec.compile(with_break)(x), with_break(x))
    assert "[pipec." not in capsys.readouterr().err


def test_recompiles(monkeypatch, capsys):
    monkeypatch.setenv(logs.ENV, "recompiles")

    def double(x):
        return x * 2

    compiled = pipec.compile(double)
    for n in (3, 4):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), x * 2)
    err = capsys.readouterr().err
    assert "[pipec.recompiles] model double: recompile 1 of frame" in err
    assert "recompile budget: 1 of 8 spent" in err


def test_tuning_logger_prints(monkeypatch, capsys):
    """The runtime's tuning log (pipec.tuning: autotuning runs on the GPU) reaches stderr."""
    monkeypatch.setenv(logs.ENV, "tuning")
    logs.configure_logs()
    logging.getLogger("pipec.tuning").info("pipec_add_0: config 1 of 2")
    assert "[pipec.tuning] pipec_add_0: config 1 of 2" in capsys.readouterr().err
    monkeypatch.delenv(logs.ENV)
    logs.configure_logs()
    logging.getLogger("pipec.tuning").info("pipec_add_0: config 1 of 2")
    assert capsys.readouterr().err == ""


def test_torch_logs_names_turn_them_on(capsys):
    if not hasattr(torch._logging, "set_logs"):
        pytest.skip("this torch has no torch._logging.set_logs")
    try:
        try:
            torch._logging.set_logs(output_code=True, autotuning=True)
            expected = {"output_code", "tuning"}
        except TypeError:  # a torch without the `autotuning` artifact: output_code alone
            torch._logging.set_logs(output_code=True)
            expected = {"output_code"}
        assert logs.configure_logs({}) == expected
    finally:
        torch._logging.set_logs()
    assert logs.configure_logs({}) == set()
