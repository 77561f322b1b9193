"""The compile cache: keys, stored entries, the local backend, hits and misses in the pipeline, the CLI.

Fast, CPU only: the fake stages (fake_stages.py) plus the built-in cache backends.
Redis is in test_pipec_cache_redis.py.
"""

import json
import os
import random
import re
import stat
import warnings
from pathlib import Path

import pytest
import torch

import pipec
import pipec.plugins
import pipec_ir
from pipec import Session, compile_graph
from pipec.cache import (BadEntry, CacheError, CompileCache, LocalCache, PipecCacheWarning, default_cache_dir,
                         graph_module_digest, pack_entry, source_digest, stage_key, unpack_entry)
from pipec_cli_testing import entry_point, run
from pipec_ir import CompileOptions

CACHE_SRC = Path(pipec.cache.__file__).parent


@pytest.fixture
def cached_fake_stages(use_entry_points):
    """The fake stages, plus the built-in cache backends (local is the default)."""
    use_entry_points([entry_point("fake", "fake_stages"), entry_point("cache", "pipec.cache.plugin")])


def tiny(a, b):
    return torch.relu(a) * b + a


def other(a, b):
    return torch.relu(a) * b - a


def traced(fn=tiny, shape=(4, 5), dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return torch.fx.symbolic_trace(fn), [torch.randn(*shape, generator=g, dtype=dtype) for _ in range(2)]


def cache_dir() -> Path:
    return Path(os.environ["PIPEC_CACHE_DIR"])


def entry_files(root: Path | None = None) -> list[Path]:
    return sorted((root or cache_dir()).glob("??/*.entry"))


def entry_kind(path: Path) -> str:
    payload = path.read_bytes().split(b"\n", 1)[1]
    return json.loads(payload)["kind"]


class Calls:
    """Counts how often each fake stage really runs."""

    def __init__(self, monkeypatch):
        import fake_stages as fs

        self.n = {"capture": 0, "fusion": 0, "codegen": 0}
        for cls, method, stage in ((fs.FakeCapture, "capture", "capture"), (fs.FakeFusion, "fuse", "fusion"),
                                   (fs.FakeCodegen, "generate", "codegen")):
            monkeypatch.setattr(cls, method, self._counting(getattr(cls, method), stage))

    def _counting(self, fn, stage):
        def run(*args, **kwargs):
            self.n[stage] += 1
            return fn(*args, **kwargs)
        return run


def small_graph() -> pipec_ir.Graph:
    gm, inputs = traced()
    import fake_stages

    return fake_stages.graph_from_fx(gm, inputs, name="small")


# ---------------------------------------------------------------- keys


def test_stage_keys_change_with_stage_implementation_version_options_and_input():
    import fake_stages

    impl = fake_stages.FakeFusion()
    entry = pipec_ir.Entry("fusion", "default", impl, "pipec-fusion", "0.1.0")
    opts, digest = CompileOptions(), "a" * 64
    base = stage_key("fusion", entry, opts, digest)
    assert base == stage_key("fusion", entry, opts, digest)
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    variants = [
        stage_key("codegen", entry, opts, digest),
        stage_key("fusion", pipec_ir.Entry("fusion", "aggressive", impl, "pipec-fusion", "0.1.0"), opts, digest),
        stage_key("fusion", pipec_ir.Entry("fusion", "default", impl, "pipec-fusion", "0.1.1"), opts, digest),
        stage_key("fusion", pipec_ir.Entry("fusion", "default", impl, "my-fusion", "0.1.0"), opts, digest),
        stage_key("fusion", entry, CompileOptions(fusion="aggressive"), digest),
        stage_key("fusion", entry, CompileOptions(autotune=False), digest),
        stage_key("fusion", entry, CompileOptions(dynamic=True), digest),
        stage_key("fusion", entry, CompileOptions(runtime="cudagraph"), digest),
        stage_key("fusion", entry, CompileOptions().with_extra(block=128), digest),
        stage_key("fusion", entry, CompileOptions().with_extra(block=256), digest),
        stage_key("fusion", entry, opts, "b" * 64),
    ]
    assert len({base, *variants}) == len(variants) + 1
    # options only the runtime reads (the built-in runtimes' `load_options`) do not change what
    # capture, fusion or codegen produce
    from pipec_runtime_cudagraph.stages import LOAD_OPTIONS

    for runtime_only in (dict(recompile_limit=3), dict(bucket="exact"), dict(choice="library"),
                         dict(autotune_configs=2)):
        assert stage_key("fusion", entry, CompileOptions().with_extra(**runtime_only), digest, LOAD_OPTIONS) == base
        assert stage_key("fusion", entry, CompileOptions().with_extra(**runtime_only), digest) != base
    # what cannot change a stage's output is not in the key
    assert stage_key("fusion", entry, CompileOptions(dump_dir="/tmp/x", cache="redis"), digest) == base


# ---------------------------------------------------------------- a plugin's code is in the key


TINY_PLUGIN = """
import dataclasses

import pipec_ir
from fake_stages import FakeFusion


class TinyFusion(FakeFusion):
    def fuse(self, graph, options):
        return dataclasses.replace(super().fuse(graph, options), policy={policy!r})


@pipec_ir.hookimpl
def pipec_register(registry):
    registry.add_fusion("tiny", TinyFusion())
"""


def tiny_plugin_wheel(tmp_path: Path, policy: str) -> Path:
    """A wheel of the distribution pipec-tiny-plugin 0.1.0 whose fusion "tiny" names its plans `policy`."""
    import base64
    import hashlib
    import zipfile

    info = "pipec_tiny_plugin-0.1.0.dist-info"
    files = {
        "pipec_tiny_plugin/__init__.py": TINY_PLUGIN.format(policy=policy),
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: pipec-tiny-plugin\nVersion: 0.1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: pipec-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": "[pipec]\ntiny = pipec_tiny_plugin\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    wheel = tmp_path / policy / "pipec_tiny_plugin-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


def pip_install_into(target: Path, wheel: Path) -> None:
    """A real, non-editable `pip install` of `wheel` into `target` (replacing what is there)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--upgrade",
                        "--disable-pip-version-check", "--quiet", "--target", str(target), str(wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_plugin_reinstalled_non_editable_with_changed_code_misses(use_entry_points, monkeypatch, tmp_path):
    """A third-party fusion policy reinstalled (not editable) at the same version with changed
    code: the next compile runs the new code instead of serving the old plan from the cache."""
    import importlib
    import sys

    target = tmp_path / "site"
    monkeypatch.syspath_prepend(str(target))
    monkeypatch.delitem(sys.modules, "pipec_tiny_plugin", raising=False)

    def install(policy: str):
        pip_install_into(target, tiny_plugin_wheel(tmp_path, policy))
        sys.modules.pop("pipec_tiny_plugin", None)  # as a new process would import it
        importlib.invalidate_caches()
        (tiny,) = importlib.metadata.distribution("pipec-tiny-plugin").entry_points
        use_entry_points([entry_point("fake", "fake_stages"), entry_point("cache", "pipec.cache.plugin"), tiny])

    def compile_plan():
        s = Session()
        plan = compile_graph(*traced(), CompileOptions(fusion="tiny"), session=s, stop_after="fusion")
        return plan.policy, s.cache_hits["fusion"]

    install("tiny-v1")
    assert compile_plan() == ("tiny-v1", 0)
    assert compile_plan() == ("tiny-v1", 1)  # warm: served from the cache
    install("tiny-v2")  # same distribution, same version 0.1.0, other code
    assert compile_plan() == ("tiny-v2", 0)
    install("tiny-v2")  # the same code again (new files, new mtimes): still a hit
    assert compile_plan() == ("tiny-v2", 1)


def test_source_file_digests_are_memoized_by_mtime_and_size(tmp_path, monkeypatch):
    from pipec.cache import keys

    path = tmp_path / "m.py"
    path.write_text("a = 1\n")
    first = keys.file_digest(str(path))
    reads = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self) or real(self))
    assert keys.file_digest(str(path)) == first and reads == []  # unchanged: not read again
    path.write_text("a = 22\n")
    assert keys.file_digest(str(path)) != first and reads == [path]


def test_a_distribution_without_a_record_is_digested_where_its_package_is_imported(tmp_path, monkeypatch):
    """A stage implementation imported from a source tree whose distribution metadata lists other
    files (a setuptools .egg-info beside it, ahead of the install on sys.path): its distribution is
    digested where its package is imported from, so a change to any module of the package, not
    only the one defining the class, changes the fingerprint."""
    import importlib
    import sys

    from pipec.cache import keys

    pkg = tmp_path / "src" / "pipec_stale_probe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .impl import Stage\n")
    (pkg / "impl.py").write_text("from .helpers import TABLE\n\nclass Stage:\n    table = TABLE\n")
    (pkg / "helpers.py").write_text("TABLE = {'a': 1}\n")
    info = tmp_path / "src" / "pipec_stale_probe.egg-info"  # lists paths that resolve nowhere
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: pipec-stale-probe\nVersion: 0.1.0\n")
    (info / "SOURCES.txt").write_text("src/pipec_stale_probe/impl.py\nsrc/pipec_stale_probe/helpers.py\n")
    (info / "top_level.txt").write_text("pipec_stale_probe\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    importlib.invalidate_caches()
    monkeypatch.delitem(sys.modules, "pipec_stale_probe", raising=False)
    module = importlib.import_module("pipec_stale_probe")
    entry = pipec_ir.Entry("fusion", "probe", module.Stage(), "pipec-stale-probe", "0.1.0")
    keys._SOURCES.pop("pipec-stale-probe", None)  # as a new process would list it
    before = keys.implementation_fingerprint(entry)
    (pkg / "helpers.py").write_text("TABLE = {'a': 2}\n")
    assert keys.implementation_fingerprint(entry) != before
    (pkg / "helpers.py").write_text("TABLE = {'a': 1}\n")
    assert keys.implementation_fingerprint(entry) == before  # the same code: the same key


def test_graph_module_digest_is_stable_and_sees_code_inputs_and_constants():
    gm, inputs = traced()
    d = graph_module_digest(gm, inputs)
    assert d == graph_module_digest(*traced())  # a fresh trace of the same code
    assert d != graph_module_digest(*traced(other))
    assert d != graph_module_digest(*traced(shape=(4, 6)))
    assert d != graph_module_digest(*traced(dtype=torch.float64))
    assert d != graph_module_digest(gm, [inputs[0].t().contiguous().t(), inputs[1]])  # same shape, other strides
    assert d == graph_module_digest(gm, [torch.zeros(4, 5), torch.ones(4, 5)])  # values do not matter

    class Scale(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.register_buffer("c", torch.tensor(c))

        def forward(self, x):
            return x * self.c

    x = [torch.ones(3)]
    # a one-element constant is inlined into the IR: its value is part of the key
    assert graph_module_digest(torch.fx.symbolic_trace(Scale(2.0)), x) != \
        graph_module_digest(torch.fx.symbolic_trace(Scale(3.0)), x)
    assert graph_module_digest(torch.fx.symbolic_trace(Scale(2.0)), x) == \
        graph_module_digest(torch.fx.symbolic_trace(Scale(2.0)), x)


def test_source_digest_of_documents_and_of_what_cannot_be_keyed():
    graph = small_graph()
    assert source_digest(graph, ()) == pipec_ir.digest(graph)
    assert source_digest(tiny, [torch.ones(2)]) is None  # a model ("export" capture): not cached
    gm, _ = traced()
    assert source_digest(gm, [object()]) is None  # an input it cannot describe


# ---------------------------------------------------------------- stored entries


def test_entry_round_trip_and_header():
    payload = pipec_ir.dumps(small_graph()).encode()
    key = "0123456789abcdef" * 4
    data = pack_entry(key, payload)
    assert data.startswith(b"pipec-cache-entry 1 " + key.encode() + b" sha256=")
    assert unpack_entry(key, data) == payload
    with pytest.raises(BadEntry, match="another key"):
        unpack_entry("f" * 64, data)


def test_every_flipped_byte_of_an_entry_is_detected():
    """Every byte position of a small entry, several bit patterns (0x20 turns a hex digit's case)."""
    payload = pipec_ir.dumps(small_graph()).encode()
    key = "0123456789abcdef" * 4
    data = pack_entry(key, payload)
    assert len(data) > 300
    undetected = []
    for i in range(len(data)):
        for mask in (0x01, 0x02, 0x20, 0x40, 0x80, 0xFF):
            bad = bytearray(data)
            bad[i] ^= mask
            try:
                unpack_entry(key, bytes(bad))
            except BadEntry:
                continue
            undetected.append((i, mask))
    assert undetected == []


def test_truncated_extended_and_foreign_entries_are_detected():
    payload = pipec_ir.dumps(small_graph()).encode()
    key = "ab" * 32
    data = pack_entry(key, payload)
    for n in range(len(data)):
        with pytest.raises(BadEntry):
            unpack_entry(key, data[:n])
    for extra in (b" ", b"\n", b"x" * 100):
        with pytest.raises(BadEntry):
            unpack_entry(key, data + extra)
    for junk in (b"", b"\x80\x04\x95 a pickle", b"{}", "text, not bytes"):
        with pytest.raises(BadEntry):
            unpack_entry(key, junk)


def test_every_flipped_byte_of_a_stored_file_is_deleted_warned_about_once_and_missed(tmp_path):
    cache = CompileCache("local", LocalCache(tmp_path / "c"))
    graph = small_graph()
    text = pipec_ir.dumps(graph)
    key = "cd" * 32
    cache.store(key, text)
    [path] = entry_files(tmp_path / "c")
    good = path.read_bytes()
    for i in range(len(good)):
        bad = bytearray(good)
        bad[i] ^= 0x01 if i % 2 else 0x20
        path.write_bytes(bytes(bad))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert cache.load(key, "graph") is None, i
        assert [type(w.message) for w in caught] == [PipecCacheWarning], i
        assert "failed its check" in str(caught[0].message)
        assert not path.exists(), i  # deleted
    path.write_bytes(good)
    assert cache.load(key, "graph") == (graph, text)


def test_a_valid_entry_holding_a_bad_document_is_rejected(tmp_path):
    cache = CompileCache("local", LocalCache(tmp_path / "c"))
    key = "ef" * 32
    cache.store(key, '{"format": "pipec-ir", "kind": "graph"}')  # right digest, wrong document
    with pytest.warns(PipecCacheWarning, match="bad graph document"):
        assert cache.load(key, "graph") is None
    cache.store(key, pipec_ir.dumps(small_graph()))
    with pytest.warns(PipecCacheWarning, match="bad kernel_plan document"):  # a graph asked for as a plan
        assert cache.load(key, "kernel_plan") is None


def test_no_pickle_in_the_cache_package():
    for path in CACHE_SRC.glob("*.py"):
        code = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+(c?pickle|dill|marshal|shelve|joblib)\b", code, re.M), path
        assert "torch.load" not in code and "pickle.load" not in code, path


# ---------------------------------------------------------------- the local backend


def test_local_cache_directory_is_private_and_writes_are_atomic(tmp_path):
    root = tmp_path / "deep" / "cache"
    cache = LocalCache(root)
    assert cache.get("ab" * 32) is None
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    cache.put("ab" * 32, b"hello")
    assert cache.get("ab" * 32) == b"hello"
    [path] = entry_files(root)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    cache.put("ab" * 32, b"again")
    assert cache.get("ab" * 32) == b"again"


def test_a_failed_write_leaves_no_entry_and_no_temporary_file(tmp_path, monkeypatch):
    cache = LocalCache(tmp_path / "c")
    cache.put("ab" * 32, b"old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        cache.put("ab" * 32, b"new")
    monkeypatch.undo()
    assert cache.get("ab" * 32) == b"old"
    assert [p.name for p in (tmp_path / "c" / "ab").iterdir()] == ["ab" * 32 + ".entry"]


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702, 0o1777])
def test_a_cache_directory_writable_by_others_is_refused(tmp_path, mode):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(mode)
    cache = LocalCache(root)
    for call in (cache.check, lambda: cache.get("ab" * 32), lambda: cache.put("ab" * 32, b"x"), cache.info):
        with pytest.raises(CacheError, match="writable by group or others"):
            call()
    assert list(root.iterdir()) == []


def test_a_cache_directory_owned_by_someone_else_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "theirs"
    root.mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: root.stat().st_uid + 1)
    with pytest.raises(CacheError, match="owned by uid"):
        LocalCache(root).check()


def test_a_file_is_not_a_cache_directory(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(CacheError, match="not a directory"):
        LocalCache(tmp_path / "f").check()


def test_local_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("PIPEC_CACHE_DIR", str(tmp_path / "env"))
    assert LocalCache().directory == tmp_path / "env"
    assert LocalCache(tmp_path / "given").directory == tmp_path / "given"
    monkeypatch.delenv("PIPEC_CACHE_DIR")
    if os.name == "posix" and not os.uname().sysname == "Darwin":
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert default_cache_dir() == tmp_path / "xdg" / "pipec" / "compile"
        monkeypatch.delenv("XDG_CACHE_HOME")
        assert default_cache_dir() == Path.home() / ".cache" / "pipec" / "compile"


def test_local_info_and_clear_touch_only_entries(tmp_path):
    root = tmp_path / "c"
    cache = LocalCache(root)
    for i in range(3):
        cache.put(f"{i:02x}" * 32, b"x" * (i + 1))
    (root / "README").write_text("not ours")
    (root / "00" / "notes.txt").write_text("not ours either")
    assert cache.info() == {"backend": "local", "location": str(root), "entries": 3, "bytes": 6}
    assert cache.clear() == 3
    assert cache.info()["entries"] == 0
    assert (root / "README").exists() and (root / "00" / "notes.txt").exists()


def test_bad_keys_never_become_paths(tmp_path):
    cache = LocalCache(tmp_path / "c")
    for key in ("../../etc/passwd", "AB" * 32, "", "ab/cd" * 10):
        with pytest.raises(ValueError):
            cache.get(key)


# ---------------------------------------------------------------- the pipeline


def test_warm_compile_hits_capture_fusion_and_codegen_with_identical_results(cached_fake_stages, monkeypatch):
    calls = Calls(monkeypatch)
    gm, inputs = traced()
    cold = Session()
    fn = compile_graph(gm, inputs, CompileOptions(), session=cold, name="tiny")
    assert cold.cache == "local"
    assert cold.cache_misses == {"capture": 1, "fusion": 1, "codegen": 1}
    assert cold.cache_hits == {"capture": 0, "fusion": 0, "codegen": 0}
    assert len(entry_files()) == 3

    warm = Session()
    gm2, _ = traced()  # a new trace of the same function, as after torch._dynamo.reset()
    fn2 = compile_graph(gm2, inputs, CompileOptions(), session=warm, name="tiny")
    assert warm.cache_hits == {"capture": 1, "fusion": 1, "codegen": 1}
    assert warm.cache_misses == {"capture": 0, "fusion": 0, "codegen": 0}
    assert calls.n == {"capture": 1, "fusion": 1, "codegen": 1}  # the warm compile ran none of them
    assert torch.equal(fn(inputs)[0], fn2(inputs)[0])
    torch.testing.assert_close(fn2(inputs)[0], tiny(*inputs))

    def stats(s):
        d = s.graphs[0].to_dict()
        return {k: v for k, v in d.items() if k not in ("stage_seconds", "cache")}

    assert stats(warm) == stats(cold)
    assert warm.graphs[0].cache == {"capture": "hit", "fusion": "hit", "codegen": "hit"}


def test_other_options_or_inputs_miss(cached_fake_stages, monkeypatch):
    calls = Calls(monkeypatch)
    compile_graph(*traced(), CompileOptions())
    s = Session()
    # every key holds all of CompileOptions.key(): another fusion policy misses from capture on
    compile_graph(*traced(), CompileOptions(fusion="none"), session=s)
    assert s.cache_misses == {"capture": 1, "fusion": 1, "codegen": 1}
    s = Session()
    compile_graph(*traced(shape=(2, 3)), CompileOptions(), session=s)
    assert s.cache_misses == {"capture": 1, "fusion": 1, "codegen": 1}
    s = Session()
    compile_graph(*traced(), CompileOptions(fusion="none"), session=s)
    assert s.cache_hits == {"capture": 1, "fusion": 1, "codegen": 1}
    assert calls.n == {"capture": 3, "fusion": 3, "codegen": 3}


def test_the_runtimes_load_options_do_not_miss(cached_fake_stages, monkeypatch):
    """Options the chosen runtime declares it reads only at load (`load_options`) stay out of the
    keys: another size-bucket policy recompiles nothing. Undeclared, they are keyed."""
    import fake_stages as fs

    compile_graph(*traced(), CompileOptions().with_extra(bucket="pow2"))
    s = Session()
    compile_graph(*traced(), CompileOptions().with_extra(bucket="exact"), session=s)
    assert s.cache_misses == {"capture": 1, "fusion": 1, "codegen": 1}
    monkeypatch.setattr(fs.FakeRuntime, "load_options", frozenset({"bucket"}), raising=False)
    compile_graph(*traced(), CompileOptions().with_extra(bucket="pow2"))
    s = Session()
    compile_graph(*traced(), CompileOptions().with_extra(bucket="exact"), session=s)
    assert s.cache_hits == {"capture": 1, "fusion": 1, "codegen": 1}


def test_documents_given_to_the_pipeline_are_cached_too(cached_fake_stages):
    compile_graph(*traced(), CompileOptions())
    graph = compile_graph(*traced(), CompileOptions(), stop_after="capture")
    s = Session()
    plan = compile_graph(graph, (), CompileOptions(), session=s, stop_after="fusion")
    assert s.cache_hits == {"fusion": 1}  # the graph's fusion was cached by the whole compile
    assert isinstance(plan, pipec_ir.KernelPlan)


def test_cache_none_turns_the_cache_off(cached_fake_stages, monkeypatch):
    calls = Calls(monkeypatch)
    for _ in range(2):
        s = Session()
        compile_graph(*traced(), CompileOptions(cache="none"), session=s)
        assert s.cache is None and s.cache_hits == {} and s.cache_misses == {}
    assert calls.n == {"capture": 2, "fusion": 2, "codegen": 2}
    assert not cache_dir().exists()


def test_without_a_registered_cache_the_default_is_off(fake_stages):
    s = Session()
    compile_graph(*traced(), CompileOptions(), session=s)
    assert s.cache is None and s.cache_hits == {}


def test_an_unknown_cache_is_a_pipec_error(cached_fake_stages):
    with pytest.raises(pipec.PipecError, match=r"unknown cache 'nope' \(registered: local, redis\)"):
        compile_graph(*traced(), CompileOptions(cache="nope"))
    with pytest.raises(ValueError, match="unknown cache 'nope'"):
        pipec.make_options(cache="nope")
    assert pipec.make_options(cache="none").cache == "none"


def test_an_unsafe_cache_directory_fails_the_compile(cached_fake_stages):
    cache_dir().mkdir(mode=0o700)
    cache_dir().chmod(0o777)
    with pytest.raises(CacheError, match="writable by group or others"):
        compile_graph(*traced(), CompileOptions())


def test_a_corrupted_entry_is_recompiled_with_one_warning(cached_fake_stages, monkeypatch):
    gm, inputs = traced()
    expected = compile_graph(gm, inputs, CompileOptions())(inputs)[0]
    [program] = [p for p in entry_files() if entry_kind(p) == "program"]
    good = program.read_bytes()
    header_end = good.index(b"\n") + 1
    positions = list(range(header_end)) + random.Random(0).sample(range(header_end, len(good)), 40)
    calls = Calls(monkeypatch)
    for n, i in enumerate(positions, 1):
        bad = bytearray(good)
        bad[i] ^= 0x04
        program.write_bytes(bytes(bad))
        s = Session()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn = compile_graph(*traced(), CompileOptions(), session=s)
        assert [type(w.message) for w in caught] == [PipecCacheWarning], i
        assert s.cache_hits == {"capture": 1, "fusion": 1, "codegen": 0}, i
        assert calls.n["codegen"] == n  # recompiled
        assert program.read_bytes() == good  # and stored again, whole
        assert torch.equal(fn(inputs)[0], expected)


def test_a_broken_backend_costs_a_warning_not_the_compile(cached_fake_stages):
    class Broken:
        def get(self, key):
            raise RuntimeError("disk on fire")

        def put(self, key, data):
            raise RuntimeError("disk on fire")

    pipec.get_registry().add_cache("broken", Broken())
    s = Session()
    gm, inputs = traced()
    with pytest.warns(PipecCacheWarning, match="disk on fire"):
        fn = compile_graph(gm, inputs, CompileOptions(cache="broken"), session=s)
    torch.testing.assert_close(fn(inputs)[0], tiny(*inputs))
    assert s.cache_misses == {"capture": 1, "fusion": 1, "codegen": 1}


def test_explain_reports_hits_and_misses(cached_fake_stages):
    x = torch.randn(4, 5)
    cold = pipec.explain(tiny, x, x)
    torch._dynamo.reset()
    warm = pipec.explain(tiny, x, x)
    assert cold.cache == warm.cache == "local"
    assert cold.cache_misses == warm.cache_hits == {"capture": 1, "fusion": 1, "codegen": 1}
    data = json.loads(warm.to_json())
    assert data["cache"] == "local"
    assert data["cache_hits"] == {"capture": 1, "fusion": 1, "codegen": 1}
    assert data["cache_misses"] == {"capture": 0, "fusion": 0, "codegen": 0}
    assert data["graphs"][0]["cache"] == {"capture": "hit", "fusion": "hit", "codegen": "hit"}
    off = pipec.explain(tiny, x, x, cache="none")
    assert off.cache is None and off.cache_hits == {} and off.to_dict()["cache"] is None


# ---------------------------------------------------------------- the command line


def error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_cli_compile_shows_hits_and_no_cache(cached_fake_stages, model_file, capsys):
    code, out, err = run(["compile", model_file, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["cache"] == "local" and data["options"]["cache"] == "local"
    assert data["cache_misses"] == {"capture": 1, "fusion": 1, "codegen": 1}
    torch._dynamo.reset()
    code, out, err = run(["compile", model_file], capsys)
    assert code == 0, err
    assert "local: hits capture 1, fusion 1, codegen 1; misses none" in out
    assert "(cache hit)" in err  # the progress lines
    torch._dynamo.reset()
    code, out, err = run(["compile", model_file, "--no-cache", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["cache"] is None and data["options"]["cache"] == "none" and data["cache_hits"] == {}
    torch._dynamo.reset()
    code, out, err = run(["explain", model_file, "--cache", "none"], capsys)
    assert code == 0, err
    assert re.search(r"cache\s+│ off", out)


def test_cli_cache_info_and_clear(cached_fake_stages, model_file, capsys):
    code, out, err = run(["cache", "info", "--json"], capsys)
    assert code == 0, err
    aot = {"location": str(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / "aotautograd"), "entries": 0, "bytes": 0}
    kernels = json.loads(out).pop("kernels")
    assert json.loads(out) | {"version": None} == {"backend": "local", "location": str(cache_dir()), "entries": 0,
                                                    "bytes": 0, "distribution": "pipec", "version": None,
                                                    "aot_autograd": aot, "kernels": kernels}
    assert set(kernels) == {"location", "sources", "stored_launches", "bytes"}
    assert run(["compile", model_file], capsys)[0] == 0
    code, out, err = run(["cache", "info", "--json"], capsys)
    info = json.loads(out)
    assert info["entries"] == 3 and info["bytes"] == sum(p.stat().st_size for p in entry_files())
    code, out, err = run(["cache", "info"], capsys)
    assert code == 0 and "location" in out and re.search(r"entries\s+│ 3 ", out), out
    code, out, err = run(["cache", "clear"], capsys)
    assert code == 0, err
    assert "cleared 3 entries from the local cache" in out and "and 0 of pipec's from AOTAutograd's cache" in out
    assert entry_files() == []
    code, out, err = run(["cache", "clear", "--json"], capsys)
    assert json.loads(out)["removed"] == 0


def test_cli_cache_info_shows_the_kernel_directory(cached_fake_stages, capsys, monkeypatch, tmp_path):
    """The runtime's kernel directory is not the compile cache, but it grows with it: kernel
    sources, the launch store's cubins, tuning results."""
    kernels = tmp_path / "kernels"
    (kernels / "launches").mkdir(parents=True)
    for name, data in (("a.py", b"x" * 10), ("b.py", b"y" * 20), ("tuning.json", b"{}"),
                       ("launches/k.cubin", b"c" * 100), ("launches/k.json", b"{}")):
        (kernels / name).write_bytes(data)
    monkeypatch.setenv("PIPEC_KERNEL_DIR", str(kernels))
    code, out, err = run(["cache", "info", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["kernels"] == {"location": str(kernels), "sources": 2, "stored_launches": 1,
                                          "bytes": 10 + 20 + 2 + 100 + 2}
    code, out, err = run(["cache", "info"], capsys)
    assert re.search(r"kernel directory\s+│ 2 kernel sources, 1 stored launches, 134 bytes in all", out), out


@pytest.mark.parametrize("argv, message", [
    (["cache", "info", "--cache", "nope"], "error: unknown cache 'nope' (registered: local, redis)"),
    (["cache", "clear", "--cache", "none"], "error: --cache none: there is no cache to show or clear"),
])
def test_cli_cache_usage_errors(cached_fake_stages, capsys, argv, message):
    code, _, err = run(argv, capsys)
    assert code == 2
    assert error_line(err) == message


def test_cli_refuses_an_unsafe_cache_directory_with_exit_2(cached_fake_stages, model_file, capsys):
    cache_dir().mkdir(mode=0o700)
    cache_dir().chmod(0o777)
    for argv in (["compile", model_file], ["cache", "info"], ["cache", "clear"]):
        code, _, err = run(argv, capsys)
        assert code == 2, argv
        assert "writable by group or others" in error_line(err)
    code, _, err = run(["compile", model_file, "--no-cache"], capsys)
    assert code == 0, err


def test_cli_unreachable_redis_is_one_line_and_exit_2(cached_fake_stages, model_file, capsys, monkeypatch):
    pytest.importorskip("redis")  # without the package the (tested) error names the package instead
    monkeypatch.setenv("PIPEC_REDIS_URL", "redis://127.0.0.1:1/0")
    for argv in (["compile", model_file, "--cache", "redis"], ["cache", "info", "--cache", "redis"]):
        code, _, err = run(argv, capsys)
        assert code == 2, err
        line = error_line(err)
        assert line.startswith("error: cache redis: cannot reach the Redis server at redis://127.0.0.1:1/0"), line


class OfflineBackend:
    """A third-party backend that needs only pipec_ir: it says it cannot be used."""

    location = "nowhere://offline"

    def get(self, key):
        raise pipec_ir.CacheError("cache offline: the server is down; compile with --no-cache")

    put = info = clear = check = lambda self, *args: OfflineBackend.get(self, "")


def test_a_plugin_backend_raising_pipec_ir_cache_error_is_a_usage_error(cached_fake_stages, model_file, capsys):
    class Plugin:
        @pipec_ir.hookimpl
        def pipec_register(self, registry):
            registry.add_cache("offline", OfflineBackend())

    pipec.plugins.register_plugin(Plugin(), name="offline")
    gm, inputs = traced()
    with pytest.raises(pipec.CacheError, match="the server is down"):  # pipec's own error, from pipec_ir's
        compile_graph(gm, inputs, CompileOptions(cache="offline"), session=Session())
    for argv in (["compile", model_file, "--cache", "offline"], ["cache", "info", "--cache", "offline"],
                 ["cache", "clear", "--cache", "offline"]):
        code, _, err = run(argv, capsys)
        assert code == 2, (argv, err)
        assert error_line(err) == "error: cache offline: the server is down; compile with --no-cache", argv


def test_a_capture_that_adds_shape_guards_is_not_stored(cached_fake_stages, monkeypatch):
    """Replaying such a capture's output would lose the guards it added to its input's
    symbolic-shape environment."""
    import fake_stages as fs
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, StatelessSymbolicContext, DimDynamic

    original = fs.FakeCapture.capture

    def capture(self, gm, example_inputs, options):
        graph = original(self, gm, example_inputs, options)
        size = next(n for n in gm.graph.nodes if n.op == "placeholder").meta["val"].shape[0]
        assert bool(size > 2)  # a guard on the symbol, as a shape-specializing lowering adds
        return graph

    monkeypatch.setattr(fs.FakeCapture, "capture", capture)
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
    for hits in ({"capture": 0, "fusion": 0, "codegen": 0}, {"capture": 0, "fusion": 1, "codegen": 1}):
        s = Session()
        gm, inputs = traced()
        mode = FakeTensorMode(shape_env=ShapeEnv())  # a fresh shape environment each time
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for node, x in zip(placeholders, inputs):
            node.meta["val"] = mode.from_tensor(x, symbolic_context=dynamic)
        compile_graph(gm, inputs, CompileOptions(), session=s)
        assert s.cache_hits == hits
    assert sorted(entry_kind(p) for p in entry_files()) == ["kernel_plan", "program"]


def test_a_capture_that_only_rewrites_its_input_graph_is_stored(cached_fake_stages, monkeypatch):
    """Capture's own FX rewrites (tanh-GELU folding, moving gathers) are functions of the graph
    it was given: its output is stored and replayed."""
    import fake_stages as fs

    original = fs.FakeCapture.capture

    def capture(self, gm, example_inputs, options):
        graph = original(self, gm, example_inputs, options)
        first = next(iter(gm.graph.nodes))
        with gm.graph.inserting_after(first):
            gm.graph.call_function(torch.neg, (first,))  # an unused node: the graph changed
        return graph

    monkeypatch.setattr(fs.FakeCapture, "capture", capture)
    for hits in ({"capture": 0, "fusion": 0, "codegen": 0}, {"capture": 1, "fusion": 1, "codegen": 1}):
        s = Session()
        compile_graph(*traced(), CompileOptions(), session=s)
        assert s.cache_hits == hits


def test_graphs_that_cannot_be_keyed_are_not_cached(cached_fake_stages):
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.ReLU()

        def forward(self, x):
            return self.inner(x)

    gm = torch.fx.symbolic_trace(Outer())  # a call_module node: the submodule's code is not in the graph
    assert graph_module_digest(gm, [torch.ones(2)]) is None
    lam = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    x = lam.graph.placeholder("x")
    lam.graph.output(lam.graph.call_function(lambda t: t, (x,)))
    assert graph_module_digest(lam, [torch.ones(2)]) is None
