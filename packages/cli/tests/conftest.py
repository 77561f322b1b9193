import sys

import pytest
import torch

import pipec.plugins

from pipec_cli_testing import HERE, PLUGIN_SRC, entry_point


@pytest.fixture(autouse=True)
def fresh_plugins(monkeypatch):
    """Every test starts with no cached plugin manager and no plugin env vars."""
    monkeypatch.delenv("PIPEC_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("PIPEC_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("PIPEC_DUMP_IR", raising=False)
    monkeypatch.syspath_prepend(str(HERE))
    pipec.plugins.reset_plugins()
    torch._dynamo.reset()  # no automatic-dynamic recompiles carried over from another test
    yield
    pipec.plugins.reset_plugins()


@pytest.fixture(autouse=True)
def private_compile_cache(monkeypatch, tmp_path):
    """Every test gets an empty compile cache of its own (never ~/.cache/pipec), the default backend."""
    monkeypatch.setenv("PIPEC_CACHE_DIR", str(tmp_path / "pipec-cache"))
    # and of torch's (AOTAutograd's cache holds pipec's graphs too: pipec/aot_cache.py)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch-cache"))
    monkeypatch.delenv("PIPEC_CACHE", raising=False)


@pytest.fixture
def use_entry_points(monkeypatch):
    """use_entry_points([EntryPoint, ...]): pretend these are the installed `pipec` entry points."""
    def use(eps):
        monkeypatch.setattr(pipec.plugins, "_entry_points", lambda: list(eps))
        pipec.plugins.reset_plugins()
    return use


@pytest.fixture
def fake_stages(use_entry_points):
    """Only the fake stages (tests/fake_stages.py) are registered."""
    use_entry_points([entry_point("fake", "fake_stages")])


@pytest.fixture
def example_plugin_path(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN_SRC))
    for mod in [m for m in sys.modules if m.startswith("pipec_example_plugin")]:
        monkeypatch.delitem(sys.modules, mod)
    return PLUGIN_SRC


MODEL_SRC = '''
import torch

def model(a, b):
    return torch.relu(a) * b + a

example_inputs = (torch.randn(4, 5), torch.randn(4, 5))
'''


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(MODEL_SRC)
    return path
