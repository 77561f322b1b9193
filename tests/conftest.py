import importlib.util
import pathlib

import pytest


ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def load_example(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    inputs = mod.example_inputs() if callable(mod.example_inputs) else mod.example_inputs
    return mod.model, tuple(inputs)


@pytest.fixture
def watch_fusion_pass(monkeypatch):
    """`watch(name)`: wrap the graph rewrite `name` of fusion's engine (split_column_sums,
    split_row_reductions) for this test; returns the list the names of the partial sums it
    makes (`*_part`) are appended to."""
    import pipec_fusion.engine

    def watch(name: str) -> list[str]:
        made = []
        original = getattr(pipec_fusion.engine, name)

        def watched(graph):
            out = original(graph)
            made.extend(n.name for n in out.nodes if n.name.endswith("_part"))
            return out

        monkeypatch.setattr(pipec_fusion.engine, name, watched)
        return made

    return watch


@pytest.fixture(autouse=True)
def _private_compile_cache(monkeypatch, tmp_path):
    """Every test gets an empty compile cache of its own (never ~/.cache/pipec), the default backend."""
    monkeypatch.setenv("PIPEC_CACHE_DIR", str(tmp_path / "pipec-cache"))
    # and of torch's (AOTAutograd's cache holds pipec's graphs too: pipec/aot_cache.py)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch-cache"))
    monkeypatch.delenv("PIPEC_CACHE", raising=False)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    import torch

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def check_dynamic_training(f, lengths, batch=2, width=4, **options):
    """`pipec.compile(f, dynamic=True, **options)` trained on [batch, t, width] inputs for each t:
    the input's gradient matches eager's, from one forward and one backward compile."""
    import pipec
    import torch

    compiled = pipec.compile(f, dynamic=True, **options)
    for t in lengths:
        x = torch.randn(batch, t, width, requires_grad=True)
        compiled(x).pow(2).sum().backward()
        got, x.grad = x.grad, None
        f(x).pow(2).sum().backward()
        torch.testing.assert_close(got, x.grad)
    assert [g.kind for g in compiled.pipec_session.graphs] == ["forward", "backward"]
