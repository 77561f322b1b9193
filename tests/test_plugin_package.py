"""The example plugin package under tests/plugin_pkg, installed by scripts/install.sh --dev."""

import importlib.metadata
import subprocess
import sys
import warnings

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(
    not any(ep.name == "cautious" for ep in importlib.metadata.entry_points(group="pipec")),
    reason="tests/plugin_pkg is not installed (pip install ./tests/plugin_pkg)",
)


def test_plugin_policy_is_used_and_broken_plugin_skipped():
    r = subprocess.run([sys.executable, "-m", "pipec", "compile", str(ROOT / "examples" / "norm_softmax.py"),
                        "--fusion", "cautious", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "broken" in r.stderr  # named once, skipped
    import json

    assert json.loads(r.stdout)["fusion"] == "cautious"


def test_plugins_command_lists_third_party():
    r = subprocess.run([sys.executable, "-m", "pipec", "plugins"], capture_output=True, text=True)
    assert r.returncode == 0
    assert "cautious" in r.stdout and "pipec-example-plugin" in r.stdout


def test_disable_plugins_env(monkeypatch):
    from pipec import plugins

    monkeypatch.setenv("PIPEC_DISABLE_PLUGINS", "broken,cautious")
    plugins.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry = plugins.registry()
    assert "cautious" not in registry.names("fusion")
    plugins.reset()


@pytest.mark.skipif(not any(ep.name == "watch" for ep in importlib.metadata.entry_points(group="pipec")),
                    reason="tests/plugin_pkg is installed from before it had the `watch` entry point")
def test_installed_watch_plugin_wraps_launch():
    import json

    r = subprocess.run([sys.executable, "-m", "pipec", "plugins", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    listed = {p["plugin"]: p for p in json.loads(r.stdout)["plugins"]}
    assert listed["watch"]["wraps"] == ["runtime launch"] and listed["watch"]["status"] == "loaded"
    assert listed["broken"]["status"] == "failed"
