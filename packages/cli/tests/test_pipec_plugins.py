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


class FailingObserver:
    @pipec_ir.hookimpl
    def pipec_stage_finished(self, stage):
        raise RuntimeError(f"observer broke on {stage}")


def test_a_failing_observer_keeps_neither_the_compile_nor_the_others_from_running(fake_stages):
    import torch
    import pipec

    obs = Observer()
    plugins.register_plugin(obs, name="observer")
    plugins.register_plugin(FailingObserver(), name="failing")  # registered last: pluggy calls it first
    with pytest.warns(UserWarning, match="plugin 'failing' failed in pipec_stage_finished after capture"):
        f = pipec.compile(lambda a, b: torch.relu(a) + b)
        a, b = torch.randn(3), torch.randn(3)
        torch.testing.assert_close(f(a, b), torch.relu(a) + b)
    assert [c[0] for c in obs.calls] == ["capture", "fusion", "codegen", "runtime"]


# ---------------------------------------------------------------- composing plugins


def dist_entry_point(name, value, distribution):
    """An entry point that belongs to `distribution` (version 1.0)."""
    class Dist:
        metadata = {"Name": distribution}
        version = "1.0"

    return entry_point(name, value)._for(Dist())


@pytest.fixture
def calls():
    import order_plugins

    order_plugins.CALLS.clear()
    yield order_plugins.CALLS
    order_plugins.CALLS.clear()


def test_builtins_register_first_then_plugins_by_distribution(use_entry_points, calls):
    # found in an order sys.path could give: third-party first, and not sorted
    use_entry_points([dist_entry_point("zeta", "order_plugins:zeta", "zeta-plugin"),
                      dist_entry_point("fusion", "order_plugins:builtin", "pipec-fusion"),
                      dist_entry_point("alpha", "order_plugins:alpha", "alpha-plugin")])
    with pytest.warns(PipecPluginWarning, match="replaces fusion 'probe'"):
        registry = plugins.get_registry()
    assert calls == ["register builtin", "register alpha", "register zeta",
                     "configure builtin", "configure alpha", "configure zeta"]
    entry = registry.entry("fusion", "probe")
    assert entry.impl.label == "zeta" and entry.distribution == "zeta-plugin"  # the last registration wins
    assert [p.name for p in plugins.plugin_infos()] == ["fusion", "alpha", "zeta"]


def test_tryfirst_and_trylast_mean_first_and_last(use_entry_points, calls):
    use_entry_points([dist_entry_point("last", "order_plugins:last", "a-plugin"),
                      dist_entry_point("fusion", "order_plugins:builtin", "pipec-fusion"),
                      dist_entry_point("first", "order_plugins:first", "z-plugin")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PipecPluginWarning)
        registry = plugins.get_registry()
    assert calls[:3] == ["register first", "register builtin", "register last"]
    assert calls[3:] == ["configure first", "configure builtin", "configure last"]
    assert registry.get("fusion", "probe").label == "last"  # trylast: its choice wins


def test_in_process_plugins_come_after_entry_points(use_entry_points, calls):
    import order_plugins

    use_entry_points([dist_entry_point("zeta", "order_plugins:zeta", "zeta-plugin")])
    plugins.register_plugin(order_plugins.alpha, name="alpha")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PipecPluginWarning)
        assert plugins.get_registry().get("fusion", "probe").label == "alpha"
    assert calls[:2] == ["register zeta", "register alpha"]
    plugins.unregister_plugin(order_plugins.alpha)


def test_get_registry_inside_a_hook_is_one_clear_error(use_entry_points):
    import order_plugins

    use_entry_points([entry_point("fake", "fake_stages")])
    plugins.register_plugin(order_plugins.recursing, name="recursing")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        registry = plugins.get_registry()
    msgs = [str(w.message) for w in plugin_warnings(record)]
    assert len(msgs) == 1, msgs  # no recursion, nothing blamed on other plugins
    assert msgs[0].startswith("pipec: plugin 'recursing' failed to register: PipecPluginError: "
                              "pipec.get_registry() was called while the registry is being built")
    assert "pipec_configure" in msgs[0]
    assert "triton" in registry.names("codegen")
    info = {p.name: p for p in plugins.plugin_infos()}["recursing"]
    assert info.status == "failed to register" and "get_registry()" in info.error


def test_hook_wrapper_for_registration_is_refused(use_entry_points):
    import order_plugins

    use_entry_points([entry_point("fake", "fake_stages")])
    plugins.register_plugin(order_plugins.wrapper_hook, name="wrapper-hook")
    with pytest.warns(PipecPluginWarning, match="plugin 'wrapper-hook' failed to register: .*hook wrapper"):
        plugins.get_registry()


def test_failed_configure_is_undone_and_listed(use_entry_points):
    import order_plugins

    use_entry_points([entry_point("fake", "fake_stages")])
    original = None
    plugins.register_plugin(order_plugins.bad_configure, name="bad-configure")
    with pytest.warns(PipecPluginWarning, match="plugin 'bad-configure' failed to configure: RuntimeError"):
        registry = plugins.get_registry()
    original = registry.entry("runtime", "launch")
    assert original.wrapped_by == ()
    assert type(original.impl).__module__ == "fake_stages"
    info = {p.name: p for p in plugins.plugin_infos()}["bad-configure"]
    assert (info.status, info.error, info.wraps) == ("failed to configure", "RuntimeError: configure broke", ())


def test_registration_that_raises_leaves_nothing_behind(use_entry_points):
    class HalfRegisters:
        @pipec_ir.hookimpl
        def pipec_register(self, registry):
            registry.add_fusion("half", order_plugins_probe())
            raise RuntimeError("second half failed")

    def order_plugins_probe():
        import order_plugins

        return order_plugins.Probe("half")

    use_entry_points([entry_point("fake", "fake_stages")])
    plugins.register_plugin(HalfRegisters(), name="half")
    with pytest.warns(PipecPluginWarning, match="plugin 'half' failed to register"):
        registry = plugins.get_registry()
    assert "half" not in registry.names("fusion")


def test_watch_example_plugin_wraps_launch_in_configure(fake_stages, use_entry_points, example_plugin_path):
    import torch

    import pipec

    use_entry_points([entry_point("fake", "fake_stages"), entry_point("watch", "pipec_example_plugin.watch")])
    registry = plugins.get_registry()
    entry = registry.entry("runtime", "launch")
    assert type(entry.impl).__name__ == "WatchedRuntime"
    assert entry.wrapped_by == ("watch",) and entry.distribution == "unknown"  # still the fake stages' entry
    assert type(entry.impl.inner).__module__ == "fake_stages"
    warmed = []  # the runtime's optional `warm` (compile workers, Triton's key) reaches the wrapped one
    entry.impl.inner.warm = warmed.append
    from pipec.backend import warm_runtime
    from pipec.pipeline import Session

    warm_runtime(pipec_ir.CompileOptions(runtime="launch"), Session())
    assert warmed == [None]

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    f = pipec.compile(lambda a, b: torch.relu(a) * b + a, runtime="launch")
    torch.testing.assert_close(f(a, b), torch.relu(a) * b + a)
    assert len(entry.impl.loaded) == 1 and entry.impl.loaded[0][1] > 0
    info = {p.name: p for p in plugins.plugin_infos()}["watch"]
    assert (info.status, info.wraps, info.stages, info.role) == ("loaded", ("runtime launch",), (), "wraps")
