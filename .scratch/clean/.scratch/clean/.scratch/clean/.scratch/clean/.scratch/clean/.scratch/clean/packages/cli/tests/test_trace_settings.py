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
