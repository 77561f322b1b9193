"""A pipec model's torch settings are in force while Dynamo compiles it, and only then."""

from __future__ import annotations

import types

import torch

from pipec.trace_settings import settings_scope


def test_settings_apply_while_dynamo_compiles_and_not_around_replayed_calls():
    config = types.SimpleNamespace(flag=False)
    seen_while_compiling = []

    def backend(gm, example_inputs):
        seen_while_compiling.append(config.flag)
        return gm.forward

    fn = torch.compile(lambda x: x * 2 + 1, backend=backend)
    scope = settings_scope(lambda: [(config, "flag", True)])
    x = torch.ones(3)
    with scope:
        torch.testing.assert_close(fn(x), x * 2 + 1)
        assert not config.flag  # restored when the compile ended, while the call goes on
    with scope:
        fn(x)  # replayed: no compile, the setting is never written
    assert seen_while_compiling == [True]
    assert not config.flag
    fn(torch.ones(3, 4))  # a compile outside any pipec call sees torch's own settings
    assert seen_while_compiling[-1] is False


def test_nested_scopes_compile_under_the_innermost_model():
    config = types.SimpleNamespace(level=0)
    seen = []

    def backend(gm, example_inputs):
        seen.append(config.level)
        return gm.forward

    fn = torch.compile(lambda x: x - 1, backend=backend)
    with settings_scope(lambda: [(config, "level", 1)]):
        with settings_scope(lambda: [(config, "level", 2)]):
            fn(torch.ones(2))
        fn(torch.ones(2, 2))
    assert seen == [2, 1] and config.level == 0


def test_once_only_logging_is_a_no_op_while_dynamo_traces(monkeypatch):
    """A `logging.Logger.warning_once` (transformers adds it: a cached function Dynamo cannot
    trace) breaks a graph under plain torch.compile; pipec's trace settings make it a no-op while
    Dynamo traces, and put Dynamo's ignore list back afterwards. `trace_once_logging=True` keeps it."""
    import functools
    import logging

    from pipec_ir import CompileOptions, RecompileBudget

    from pipec.trace_settings import call_settings

    @functools.lru_cache(None)
    def warning_once(self, *args):
        self.warning(*args)

    monkeypatch.setattr(logging.Logger, "warning_once", warning_once, raising=False)
    log = logging.getLogger("pipec.test.once")

    def fn(x):
        y = x + 1
        log.warning_once("said once")
        return y * 2

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.ones(3)
    torch._dynamo.reset()
    before = set(torch._dynamo.config.ignore_logger_methods)
    with settings_scope(lambda: call_settings(CompileOptions(), RecompileBudget(8))):
        torch.testing.assert_close(torch.compile(fn, backend=backend)(x), (x + 1) * 2)
    assert len(graphs) == 1 and set(torch._dynamo.config.ignore_logger_methods) == before
    kept = call_settings(CompileOptions().with_extra(trace_once_logging=True), RecompileBudget(8))
    assert not [s for s in kept if s[1] == "ignore_logger_methods"]
