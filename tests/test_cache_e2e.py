"""The compile cache with the real stages: warm compiles of the examples, corrupted entries,
and two processes sharing one Redis server (skipped when none answers)."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

import pipec

from conftest import EXAMPLES, ROOT, load_example


@pytest.fixture(autouse=True)
def _pipec_cache_alone(monkeypatch):
    """These tests are about pipec's own cache: AOTAutograd's, which would serve a warm compile
    whole (test_aot_cache.py), is left out (also in the processes they start)."""
    monkeypatch.setenv("PIPEC_AOT_CACHE", "0")

CACHED = {"capture": 1, "fusion": 1, "codegen": 1}
NONE = {"capture": 0, "fusion": 0, "codegen": 0}
GPT2 = next(p for p in EXAMPLES if p.stem == "gpt2_block")
MLP = next(p for p in EXAMPLES if p.stem == "mlp_gelu")


def _flat(out):
    return list(out) if isinstance(out, tuple | list) else [out]


def _compile_and_run(model, inputs, **kwargs):
    torch._dynamo.reset()
    compiled = pipec.compile(model, **kwargs)
    with torch.no_grad():
        out = _flat(compiled(*inputs))
    return out, compiled.pipec_session


def entries() -> list[Path]:
    return sorted(Path(os.environ["PIPEC_CACHE_DIR"]).glob("??/*.entry"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_warm_compile_serves_capture_fusion_and_codegen_from_the_cache(path):
    model, inputs = load_example(path)
    cold_out, cold = _compile_and_run(model, inputs)
    warm_out, warm = _compile_and_run(model, inputs)
    assert cold.cache == warm.cache == "local"
    n = len(cold.graphs)
    assert cold.cache_misses == {s: n for s in CACHED} and cold.cache_hits == {s: 0 for s in CACHED}
    assert warm.cache_hits == {s: n for s in CACHED} and warm.cache_misses == {s: 0 for s in CACHED}
    for a, b in zip(cold_out, warm_out, strict=True):
        assert torch.equal(a, b)
    with torch.no_grad():
        for a, e in zip(warm_out, _flat(model(*inputs)), strict=True):
            torch.testing.assert_close(a, e, atol=2e-5, rtol=2e-5)
    assert warm.kernels == cold.kernels and warm.fusion_count == cold.fusion_count


class NewGeluMLP(torch.nn.Module):
    """transformers' "gelu_new" written out (capture folds it into one `gelu`, rewriting the FX
    graph it is given) and a tensor constant built in forward (as a KV cache starts each layer)."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        h = self.up(x)
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))
        return self.down(h) * torch.tensor([2.0])


def test_a_graph_capture_rewrites_or_holding_constants_is_served_whole_from_the_cache():
    """Capture's own rewrites of its input graph (tanh-GELU folding) do not stop its output from
    being stored, and a constant's bytes are keyed even inside AOTAutograd's fake mode."""
    torch.manual_seed(0)
    model, x = NewGeluMLP().eval(), torch.randn(4, 16)
    cold_out, cold = _compile_and_run(model, (x,))
    warm_out, warm = _compile_and_run(model, (x,))
    assert cold.cache_misses == CACHED and warm.cache_hits == CACHED
    assert torch.equal(cold_out[0], warm_out[0])
    with torch.no_grad():
        torch.testing.assert_close(warm_out[0], model(x), atol=2e-5, rtol=2e-5)


def test_a_warm_compile_parses_the_plan_only_when_its_stats_are_read(monkeypatch):
    """Every stage hits: the KernelPlan between them stays text until something reads what it
    tells (GraphStats), and then tells what the cold compile's did."""
    from pipec.cache.store import CompileCache

    model, inputs = load_example(GPT2)
    _, cold = _compile_and_run(model, inputs)
    parsed = []
    real_parse = CompileCache.parse
    monkeypatch.setattr(CompileCache, "parse", lambda self, key, kind, text: parsed.append(kind)
                        or real_parse(self, key, kind, text))
    warm_out, warm = _compile_and_run(model, inputs)
    assert warm.cache_hits == {s: len(cold.graphs) for s in CACHED}
    assert "kernel_plan" not in parsed and "program" in parsed
    (g,), (c,) = warm.graphs, cold.graphs
    assert (g.fusion_count, g.op_count, g.extern_ops, g.not_fused, g.kernel_rows, g.units) == \
           (c.fusion_count, c.op_count, c.extern_ops, c.not_fused, c.kernel_rows, c.units)
    assert parsed.count("kernel_plan") == 1 and g.plan is not None


@pytest.mark.parametrize("bad", [("kernel_plan",), ("program",), ("kernel_plan", "program")], ids="+".join)
def test_a_bad_plan_or_program_entry_is_recompiled_on_a_warm_compile(bad):
    """Entries whose sha256 holds but whose document does not parse: the program is fetched
    whole before the plan is left unparsed, so either one is recompiled with one warning."""
    from pipec.cache import LocalCache, unpack_entry
    from pipec.cache.store import CompileCache

    model, inputs = load_example(GPT2)
    cold_out, _ = _compile_and_run(model, inputs)
    cache = CompileCache("local", LocalCache(Path(os.environ["PIPEC_CACHE_DIR"])))
    for path in entries():
        text = unpack_entry(path.stem, path.read_bytes()).decode()
        kind = json.loads(text)["kind"]
        if kind in bad:
            cache.store(path.stem, json.dumps({"format": "pipec-ir", "kind": kind}))  # right digest, no document
    with pytest.warns(pipec.PipecCacheWarning) as caught:
        warm_out, warm = _compile_and_run(model, inputs)
    assert sorted(k for k in bad for w in caught if f"bad {k} document" in str(w.message)) == sorted(bad)
    for kind in bad:
        assert warm.cache_misses[{"kernel_plan": "fusion", "program": "codegen"}[kind]] == 1
    assert warm.cache_hits["capture"] == 1
    assert not [w for w in caught if issubclass(w.category, pipec.PipecFallbackWarning)]  # compiled, not eager
    assert torch.equal(cold_out[0], warm_out[0])
    assert warm.graphs[0].fusion_count > 0 and warm.graphs[0].kernel_rows


def test_explain_reports_cache_hits_of_the_gpt2_block():
    model, inputs = load_example(GPT2)
    with torch.no_grad():
        cold = pipec.explain(model, *inputs)
        warm = pipec.explain(model, *inputs)
        off = pipec.explain(model, *inputs, cache="none")
    assert (cold.cache_hits, cold.cache_misses) == (NONE, CACHED)
    assert (warm.cache_hits, warm.cache_misses) == (CACHED, NONE)
    assert off.cache is None and off.cache_hits == {} == off.cache_misses
    for report in (warm, off):
        assert (report.kernel_count, report.fusion_count, report.op_count, report.extern_ops, report.not_fused) == \
               (cold.kernel_count, cold.fusion_count, cold.op_count, cold.extern_ops, cold.not_fused)


def test_dynamic_shapes_compile_warm_and_stay_correct():
    model, (x,) = load_example(MLP)
    for run in range(2):
        torch._dynamo.reset()
        compiled = pipec.compile(model, dynamic=True)
        with torch.no_grad():
            for n in (1, 3, 17):
                xn = torch.randn(n, x.shape[1])
                torch.testing.assert_close(compiled(xn), model(xn), atol=2e-5, rtol=2e-5)
        session = compiled.pipec_session
        if run:
            assert session.cache_hits["fusion"] >= 1 and session.cache_hits["codegen"] >= 1


def pipec_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "pipec", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_a_corrupted_entry_is_recompiled_with_a_warning_by_the_cli():
    first = pipec_cli("compile", MLP, "--json", "--device", "cpu")
    assert first.returncode == 0, first.stderr
    [program] = [p for p in entries() if b'"kind":"program"' in p.read_bytes()]
    data = bytearray(program.read_bytes())
    data[len(data) // 2] ^= 0x01
    program.write_bytes(bytes(data))
    second = pipec_cli("compile", MLP, "--json", "--device", "cpu")
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["cache_hits"] == {"capture": 1, "fusion": 1, "codegen": 0}
    warnings = [ln for ln in second.stderr.splitlines() if "failed its check" in ln]
    assert len(warnings) == 1 and warnings[0].startswith("warning: pipec: cache entry "), second.stderr
    assert "sha256 mismatch" in warnings[0]
    assert report["max_error"] == json.loads(first.stdout)["max_error"]
    from pipec.cache import unpack_entry

    unpack_entry(program.name.removesuffix(".entry"), program.read_bytes())  # stored again, whole


def _redis_url() -> str | None:
    from pipec.cache import DEFAULT_REDIS_URL

    url = os.environ.get("PIPEC_REDIS_URL") or DEFAULT_REDIS_URL
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5).ping()
    except Exception:  # noqa: BLE001
        return None
    return url


@pytest.mark.skipif(_redis_url() is None, reason="no Redis server answers (.ci/run starts one)")
def test_two_processes_sharing_one_redis_get_hits_for_each_others_work(tmp_path):
    from pipec.cache import RedisCache

    prefix = f"pipec-test:{uuid.uuid4().hex}:"
    env = {"PIPEC_REDIS_URL": _redis_url(), "PIPEC_REDIS_PREFIX": prefix}
    try:
        # two processes that share nothing but the Redis server (each its own local cache directory)
        a = pipec_cli("compile", MLP, "--cache", "redis", "--json", "--device", "cpu",
                      env={**env, "PIPEC_CACHE_DIR": str(tmp_path / "a")})
        assert a.returncode == 0, a.stderr
        assert json.loads(a.stdout)["cache_misses"] == CACHED
        b = pipec_cli("compile", MLP, "--cache", "redis", "--json", "--device", "cpu",
                      env={**env, "PIPEC_CACHE_DIR": str(tmp_path / "b")})
        assert b.returncode == 0, b.stderr
        report = json.loads(b.stdout)
        assert report["cache"] == "redis" and report["cache_hits"] == CACHED and report["cache_misses"] == NONE
        assert report["max_error"] == json.loads(a.stdout)["max_error"]
        assert RedisCache(env["PIPEC_REDIS_URL"], prefix).info()["entries"] == 3
        assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # the local cache was not used
    finally:
        RedisCache(env["PIPEC_REDIS_URL"], prefix).clear()
