import importlib.util
import pathlib
import sys

import pytest
import torch

from pipec_capture import core_decompositions, lower_graph, make_dynamo_backend
from pipec_capture.reference import run_graph

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def load_example(name: str):
    mod_name = f"pipec_example_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod  # strict torch.export needs the module importable
    spec.loader.exec_module(mod)
    return mod


def dynamo_graph(fn, *args):
    """The first graph Dynamo hands a backend for `fn(*args)`, as a capture rewrite receives it
    (before AOTAutograd)."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    torch._dynamo.reset()
    torch.compile(fn, backend=keep)(*args)
    return graphs[0]


def dynamo_capture(model, inputs, *, grad=False, decompose_attention=False, check=True, tol=None):
    """torch.compile(model) with a backend that lowers every ATen graph and checks it
    with the reference interpreter against the ATen graph itself. Returns (output, records)."""
    records = []

    def compile_aten_graph(gm, example_inputs, kind):
        graph = lower_graph(gm, example_inputs, name=f"{kind}_{len(records)}")
        records.append((graph, gm, kind))

        def run(args):
            expected = gm(*args)
            if check:
                got = run_graph(graph, [a for a in args if isinstance(a, torch.Tensor)])
                for e, g in zip(expected, got):
                    if isinstance(e, torch.Tensor):
                        torch.testing.assert_close(g, e, **(tol or {}))
            return expected
        return run

    torch._dynamo.reset()
    backend = make_dynamo_backend(compile_aten_graph,
                                  decompositions=core_decompositions(decompose_attention=decompose_attention))
    compiled = torch.compile(model, backend=backend)
    if grad:
        out = compiled(*inputs)
    else:
        with torch.no_grad():
            out = compiled(*inputs)
    return out, records


@pytest.fixture
def example():
    return load_example
