"""The `redis` cache backend against a real Redis server (PIPEC_REDIS_URL, default
redis://127.0.0.1:6379/0; `.ci/run` starts one). Skipped when no server answers.

Every test uses a key prefix of its own, so tests running in parallel (and anyone
else's entries on the server) never see each other.
"""

import random
import uuid
import warnings

import pytest
import torch

import pipec_ir
from pipec import Session, compile_graph
from pipec.cache import DEFAULT_REDIS_URL, CacheError, CompileCache, PipecCacheWarning, RedisCache
from pipec_cli_testing import entry_point
from pipec_ir import CompileOptions

from test_pipec_cache import Calls, small_graph, tiny, traced


def _server_url() -> str | None:
    import os

    url = os.environ.get("PIPEC_REDIS_URL") or DEFAULT_REDIS_URL
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5).ping()
    except Exception:  # noqa: BLE001 - no package, no server: skip
        return None
    return url


URL = _server_url()
pytestmark = pytest.mark.skipif(URL is None, reason="no Redis server answers (PIPEC_REDIS_URL or "
                                                    "redis://127.0.0.1:6379/0); .ci/run starts one")


@pytest.fixture
def prefix(monkeypatch):
    """A key prefix of this test's own, removed afterwards."""
    p = f"pipec-test:{uuid.uuid4().hex}:"
    monkeypatch.setenv("PIPEC_REDIS_PREFIX", p)
    yield p
    RedisCache(URL, p).clear()


@pytest.fixture
def redis_fake_stages(use_entry_points, prefix, monkeypatch):
    monkeypatch.setenv("PIPEC_REDIS_URL", URL)
    use_entry_points([entry_point("fake", "fake_stages"), entry_point("cache", "pipec.cache.plugin")])


def test_put_get_delete_info_clear(prefix):
    cache = RedisCache(URL)
    assert cache.prefix == prefix
    key = "ab" * 32
    assert cache.get(key) is None
    cache.put(key, b"hello")
    assert cache.get(key) == b"hello"
    cache.put("cd" * 32, b"xyz")
    assert cache.info() | {"location": None} == {"backend": "redis", "location": None, "entries": 2, "bytes": 8}
    cache.delete(key)
    assert cache.get(key) is None
    foreign = RedisCache(URL, f"pipec-test:{uuid.uuid4().hex}:")
    foreign.put(key, b"not ours")
    try:
        assert cache.clear() == 1
        assert cache.info()["entries"] == 0
        assert foreign.get(key) == b"not ours"  # another prefix is left alone
    finally:
        foreign.clear()


def test_flipped_bytes_from_redis_are_detected_and_deleted(prefix):
    cache = CompileCache("redis", RedisCache(URL))
    graph = small_graph()
    text = pipec_ir.dumps(graph)
    key = "ef" * 32
    cache.store(key, text)
    raw = cache.backend.get(key)
    header = raw.index(b"\n") + 1
    positions = list(range(header)) + random.Random(1).sample(range(header, len(raw)), 100)
    for i in positions:
        bad = bytearray(raw)
        bad[i] ^= 0x10
        cache.backend.put(key, bytes(bad))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert cache.load(key, "graph") is None, i
        assert [type(w.message) for w in caught] == [PipecCacheWarning], i
        assert cache.backend.get(key) is None  # deleted
    cache.backend.put(key, raw)
    assert cache.load(key, "graph") == (graph, text)


def test_warm_compile_through_redis(redis_fake_stages, monkeypatch):
    calls = Calls(monkeypatch)
    gm, inputs = traced()
    cold = Session()
    fn = compile_graph(gm, inputs, CompileOptions(cache="redis"), session=cold)
    assert cold.cache == "redis" and cold.cache_misses == {"capture": 1, "fusion": 1, "codegen": 1}
    warm = Session()
    fn2 = compile_graph(*traced(), CompileOptions(cache="redis"), session=warm)
    assert warm.cache_hits == {"capture": 1, "fusion": 1, "codegen": 1}
    assert calls.n == {"capture": 1, "fusion": 1, "codegen": 1}
    assert torch.equal(fn(inputs)[0], fn2(inputs)[0])
    torch.testing.assert_close(fn2(inputs)[0], tiny(*inputs))
    # the local cache was not touched
    local = Session()
    compile_graph(*traced(), CompileOptions(), session=local)
    assert local.cache == "local" and local.cache_misses == {"capture": 1, "fusion": 1, "codegen": 1}


def test_an_unreachable_server_is_a_clear_error(redis_fake_stages, monkeypatch):
    monkeypatch.setenv("PIPEC_REDIS_URL", "redis://:secret@127.0.0.1:1/0")
    with pytest.raises(CacheError) as info:
        compile_graph(*traced(), CompileOptions(cache="redis"))
    message = str(info.value)
    assert message.startswith("cache redis: cannot reach the Redis server at redis://:***@127.0.0.1:1/0")
    assert "secret" not in message and "\n" not in message
