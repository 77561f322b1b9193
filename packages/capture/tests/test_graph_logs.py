"""AOTAutograd's graph printouts are made only when a log reads them (graph_logs.py)."""

import logging
import sys

import torch

from pipec_capture.aot import core_decompositions, make_dynamo_backend


def train_step_printouts() -> int:
    """How many graphs AOTAutograd printed as source while a small model's training step compiled
    (Dynamo's own printout, which pytest's log capture asks for, is not counted)."""
    printed = []
    original = torch.fx.GraphModule.print_readable

    def counting(self, *args, **kwargs):
        if "_aot_autograd" in sys._getframe(1).f_code.co_filename:
            printed.append(type(self).__name__)
        return original(self, *args, **kwargs)

    torch._dynamo.reset()
    backend = make_dynamo_backend(lambda gm, inputs, kind: (lambda args: gm(*args)),
                                  decompositions=core_decompositions())
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    torch.fx.GraphModule.print_readable = counting
    try:
        torch.compile(model, backend=backend)(torch.randn(4, 8)).sum().backward()
    finally:
        torch.fx.GraphModule.print_readable = original
    return len(printed)


def test_no_graph_is_printed_when_no_log_reads_it():
    assert train_step_printouts() == 0


def test_the_graphs_are_logged_when_asked(caplog):
    torch._logging.set_logs(aot_graphs=True)
    try:
        with caplog.at_level(logging.INFO):
            printed = train_step_printouts()
    finally:
        torch._logging.set_logs()
    assert printed >= 3  # joint, forward and backward
    assert "Forward graph" in caplog.text and "Backward graph" in caplog.text
