"""Registry: adding, wrapping, snapshots, and what it refuses."""

import pytest

import pipec_ir


class Launch:
    def load(self, program, options):
        return lambda inputs: inputs


class Counting:
    def __init__(self, inner):
        self.inner, self.loads = inner, 0

    def load(self, program, options):
        self.loads += 1
        return self.inner.load(program, options)


def test_wrap_keeps_the_entry_and_records_the_wrapping_plugin():
    registry = pipec_ir.Registry()
    registry.add_runtime("launch", Launch())
    registry.credit("runtime", "launch", "pipec-runtime-cudagraph", "0.1.0")
    inner = registry.get("runtime", "launch")
    registry.current_plugin = "watch"
    outer = registry.wrap("runtime", "launch", Counting)
    registry.current_plugin = "audit"
    outermost = registry.wrap("runtime", "launch", Counting)
    entry = registry.entry("runtime", "launch")
    assert entry.impl is outermost and outermost.inner is outer and outer.inner is inner
    assert (entry.distribution, entry.version) == ("pipec-runtime-cudagraph", "0.1.0")
    assert entry.wrapped_by == ("watch", "audit")
    assert entry.impl.load(None, None)([1]) == [1] and outer.loads == 1


def test_wrap_refuses_unknown_names_and_objects_without_the_protocol():
    registry = pipec_ir.Registry()
    registry.add_runtime("launch", Launch())
    with pytest.raises(pipec_ir.UnknownStageError, match=r"unknown runtime 'cudagraph' \(registered: launch\)"):
        registry.wrap("runtime", "cudagraph", Counting)
    with pytest.raises(TypeError, match="runtime implementation 'launch' does not provide the runtime protocol"):
        registry.wrap("runtime", "launch", lambda inner: object())
    assert type(registry.get("runtime", "launch")) is Launch  # unchanged by the refusals


def test_snapshot_and_restore():
    registry = pipec_ir.Registry()
    registry.add_runtime("launch", Launch())
    before = registry.snapshot()
    registry.wrap("runtime", "launch", Counting)
    registry.add_runtime("other", Launch())
    registry.restore(before)
    assert registry.names("runtime") == ["launch"] and type(registry.get("runtime", "launch")) is Launch


def test_cache_protocols():
    class GetPut:
        def get(self, key):
            return None

        def put(self, key, data):
            pass

    assert isinstance(GetPut(), pipec_ir.Cache) and not isinstance(GetPut(), pipec_ir.CacheAdmin)
    assert issubclass(pipec_ir.CacheError, Exception) and not issubclass(pipec_ir.CacheError, pipec_ir.IRError)
