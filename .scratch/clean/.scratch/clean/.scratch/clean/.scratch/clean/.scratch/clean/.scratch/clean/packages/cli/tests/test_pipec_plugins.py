import importlib.metadata
import warnings

import pytest

import pipec_ir
import pipec.plugins as plugins
from pipec.errors import PipecPluginWarning

from pipec_cli_testing import entry_point


def plugin_warnings(record):
    return [w for w in record if issubclass(w.category, PipecPluginWarning)]


def test_failing_entry_point_is_named_in_one_warning_and_skipped(use_entry_points, example_plugin_path):
    use_entry_points([entry_point("fake", "fake_stages"),
                      entry_point("broken", "pipec_example_plugin.broken"),
                      entry_point("missing", "no_such_module_for_pipec_tests")])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        registry = plugins.get_registry()
    msgs = [str(w.message) for w in plugin_warnings(record)]
    assert len(msgs) == 2
    assert sum("'broken'" in m for m in msgs) == 1
    broken = next(m for m in msgs if "'broken'" in m)
    assert broken.startswith("pipec: plugin 'broken' (dist ")
    assert "failed to load: ImportError: pipec_example_plugin.broken is broken on purpose" in broken
    assert broken.endswith("; skipped")
    assert "\n" not in broken
    # the good plugin still registered everything
    assert "default" in registry.names("fusion")
    status = {p.name: p.status for p in plugins.plugin_infos()}
    assert status == {"fake": "loaded", "broken": "failed", "missing": "failed"}


def test_failing_plugin_warns_once_per_process(use_entry_points):
    use_entry_points([entry_point("fake", "fake_stages"), entry_point("missing", "no_such_module_xyz")])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        plugins.get_registry()
        plugins.get_registry()
        plugins.get_plugin_manager()
    assert len(plugin_warnings(record)) == 1


def test_real_importlib_metadata_entry_points_are_read(monkeypatch, example_plugin_path):
    eps = importlib.metadata.EntryPoints([entry_point("fake", "fake_stages"),
                                          entry_point("broken", "pipec_example_plugin.broken")])

    def fake_entry_points(**params):
        assert params == {"group": "pipec"}
        return eps

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    plugins.reset_plugins()
    with pytest.warns(PipecPluginWarning, match="plugin 'broken'"):
        registry = plugins.get_registry()
    assert registry.names("codegen") == ["triton"]


def test_disable_list_blocks_plugins(use_entry_points, example_plugin_path, monkeypatch):
    use_entry_points([entry_point("fake", "fake_stages"), entry_point("broken", "pipec_example_plugin.broken")])
    monkeypatch.setenv("PIPEC_DISABLE_PLUGINS", "broken, other")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        registry = plugins.get_registry()
    assert plugin_warnings(record) == []  # never imported
    assert "dynamo" in registry.names("capture")
    assert {p.name: p.status for p in plugins.plugin_infos()}["broken"] == "disabled"


def test_allow_list_loads_only_named_plugins(use_entry_points, example_plugin_path, monkeypatch):
    use_entry_points([entry_point("fake", "fake_stages"), entry_point("broken", "pipec_example_plugin.broken"),
                      entry_point("cautious", "pipec_example_plugin.cautious")])
    monkeypatch.setenv("PIPEC_LOAD_PLUGINS", "fake")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        registry = plugins.get_registry()
    assert plugin_warnings(record) == []
    assert sorted(registry.names("fusion")) == ["crash", "default", "invalid", "none"]
    status = {p.name: p.status for p in plugins.plugin_infos()}
    assert status == {"fake": "loaded", "broken": "not allowed", "cautious": "not allowed"}


def test_registry_is_cached_until_reset(use_entry_points):
    use_entry_points([entry_point("fake", "fake_stages")])
    first = plugins.get_registry()
    assert plugins.get_registry() is first
    plugins.reset_plugins()
    assert plugins.get_registry() is not first


class RaisingRegister:
    @pipec_ir.hookimpl
    def pipec_register(self, registry):
        raise RuntimeError("cannot register today")


def test_plugin_whose_registration_raises_is_skipped(use_entry_points):
    use_entry_points([entry_point("fake", "fake_stages")])
    plugins.register_plugin(RaisingRegister(), name="raiser")
    with pytest.warns(PipecPluginWarning, match="plugin 'raiser' failed to register: RuntimeError"):
        registry = plugins.get_registry()
    assert "triton" in registry.names("codegen")


def test_cautious_example_plugin_registers_a_fusion_policy(use_entry_points, example_plugin_path):
    pipec_fusion = pytest.importorskip("pipec_fusion")
    use_entry_points([entry_point("cautious", "pipec_example_plugin.cautious")])
    registry = plugins.get_registry()
    fusion = registry.get("fusion", "cautious")
    assert isinstance(fusion, pipec_ir.Fusion)
    assert isinstance(fusion.heuristics, pipec_fusion.Heuristics)

    # pointwise -> pointwise fuses, anything involving a reduction does not
    import sympy
    t = pipec_ir.TensorType((sympy.Integer(4), sympy.Integer(8)), "float32")
    r = pipec_ir.TensorType((sympy.Integer(4), sympy.Integer(1)), "float32")
    graph = pipec_ir.Graph("g", (pipec_ir.GraphInput("x", t),), (
        pipec_ir.Node("a", "exp", ("x",), t),
        pipec_ir.Node("b", "neg", ("a",), t),
        pipec_ir.Node("c", "sum", ("b",), r, pipec_ir.make_attrs(dims=(1,), keepdim=True)),
    ), ("c",))
    plan = fusion.fuse(graph, pipec_ir.CompileOptions(fusion="cautious"))
    assert plan.policy == "cautious"
    kernel_of = {n: k.name for k in plan.kernels for n in k.nodes}
    assert kernel_of["a"] == kernel_of["b"] != kernel_of["c"]
    assert any("cautious" in r.reason for r in plan.rejected)


def test_stage_credited_to_the_registering_distribution(use_entry_points, example_plugin_path):
    pytest.importorskip("pipec_fusion")
    ep = entry_point("cautious", "pipec_example_plugin.cautious")

    class Dist:
        metadata = {"Name": "pipec-example-plugin"}
        version = "0.1.0"

    ep = ep._for(Dist()) if hasattr(ep, "_for") else ep
    use_entry_points([ep])
    entry = plugins.get_registry().entry("fusion", "cautious")
    assert (entry.distribution, entry.version) == ("pipec-example-plugin", "0.1.0")


class Observer:
    def __init__(self):
        self.calls = []

    @pipec_ir.hookimpl
    def pipec_stage_finished(self, stage, name, document, seconds):
        self.calls.append((stage, name, type(document).__name__))


def test_stage_finished_observer_sees_every_stage(fake_stages):
    import torch
    import pipec

    obs = Observer()
    plugins.register_plugin(obs, name="observer")
    f = pipec.compile(lambda a, b: torch.relu(a) + b)
    f(torch.randn(3), torch.randn(3))
    assert [c[0] for c in obs.calls] == ["capture", "fusion", "codegen", "runtime"]
    assert [c[2] for c in obs.calls[:3]] == ["Graph", "KernelPlan", "Program"]
