"""pipec's graphs in AOTAutograd's own cache (pipec/aot_cache.py, pipec_capture/aot_cache.py).

A compile after `torch._dynamo.reset()` (or in a new process) finds the graph in AOTAutograd's
cache: neither AOTAutograd's trace nor any pipec stage but the runtime runs, and the result
still matches eager. Each test has empty pipec and torch caches (conftest.py)."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._dynamo.utils import counters

import pipec
from pipec.aot_cache import cache_tag, pickle_layers, unpickle_layers
from pipec.aot_entry import CompiledGraph
from pipec.graph_call import SizeOutputs, TensorsOnly, size_function
from pipec.plugins import get_registry
from pipec_capture.aot_cache import cache_supported

pytestmark = pytest.mark.skipif(not cache_supported(), reason="this torch has no AOTAutograd cache for backends")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"))]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


def train_step(model, x, **options):
    """(loss, gradients) of one step of `model` compiled with `options`, and the compile's Session."""
    model.zero_grad()
    run = pipec.compile(model, **options)
    loss = run(x).square().mean()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, run.pipec_session


def aot_counts() -> dict:
    return {k: counters["aot_autograd"][k] for k in ("autograd_cache_hit", "autograd_cache_miss",
                                                      "autograd_cache_saved")}


@pytest.mark.parametrize("device", DEVICES)
def test_a_training_step_compiled_again_comes_from_aotautograds_cache(device):
    torch.manual_seed(0)
    model, x = Block().to(device), torch.randn(64 if device == "cuda" else 4, 8, device=device)
    counters.clear()
    cold_loss, cold_grads, cold = train_step(model, x)
    assert aot_counts() == {"autograd_cache_hit": 0, "autograd_cache_miss": 1, "autograd_cache_saved": 1}
    torch._dynamo.reset()
    warm_loss, warm_grads, warm = train_step(model, x)
    assert aot_counts()["autograd_cache_hit"] == 1
    assert [g.cache for g in warm.graphs] == [{"aot_autograd": "hit"}] * 2  # no pipec stage looked up
    assert [g.cache.get("aot_autograd") for g in cold.graphs] == ["miss", "miss"]
    for c, w in zip(cold.graphs, warm.graphs):  # reported as compiled
        assert (w.name, w.kind, w.op_count, w.kernel_count, w.fusion_count, w.extern_ops, w.not_fused) == \
            (c.name, c.kind, c.op_count, c.kernel_count, c.fusion_count, c.extern_ops, c.not_fused)
        assert [r["runs_as"] for r in w.kernel_rows] == [r["runs_as"] for r in c.kernel_rows]
        # the plan, read from pipec's compile cache at the first read of `plan`
        assert w.plan is not None and w.plan_key == c.plan_key
        assert [k.nodes for k in w.plan.kernels] == [k.nodes for k in c.plan.kernels]
    model.zero_grad()
    eager_loss = model(x).square().mean()
    eager_loss.backward()
    torch.testing.assert_close(warm_loss, eager_loss.detach())
    torch.testing.assert_close(cold_loss, eager_loss.detach())
    for name, p in model.named_parameters():
        torch.testing.assert_close(warm_grads[name], p.grad)
        torch.testing.assert_close(cold_grads[name], p.grad)


def test_other_options_or_aot_cache_off_do_not_hit():
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8)
    train_step(model, x)
    for options in ({"fusion": "none"}, {"aot_cache": False}):
        torch._dynamo.reset()
        counters.clear()
        _, _, session = train_step(model, x, **options)
        assert aot_counts()["autograd_cache_hit"] == 0, options
        assert all("aot_autograd" not in g.cache or g.cache["aot_autograd"] == "miss" for g in session.graphs)
    torch._dynamo.reset()
    report = pipec.explain(model, x)  # explain reads every stage: pipec's own cache serves it
    assert report.cache_hits.get("aot_autograd", 0) == 0 and report.cache_hits["codegen"] >= 1


def test_a_graph_that_fails_to_load_is_compiled_again_and_its_entry_replaced(monkeypatch):
    """The backward's load fails after the forward's succeeded: one warning, the step compiled
    as on a miss (the forward's loaded statistics and names given back), the entry rewritten."""
    import pipec.backend

    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8)
    cold = train_step(model, x)
    real, loads = pipec.backend.unpickle_layers, []

    def second_fails(data, runtime):
        loads.append(1)
        if len(loads) == 2:
            raise RuntimeError("a damaged entry")
        return real(data, runtime)

    monkeypatch.setattr(pipec.backend, "unpickle_layers", second_fails)
    torch._dynamo.reset()
    counters.clear()
    with pytest.warns(UserWarning, match="graph block_0_backward from AOTAutograd's cache could not be loaded"):
        again = train_step(model, x)
    assert [(g.name, g.cache["aot_autograd"]) for g in again[2].graphs] == [("block_0", "miss"),
                                                                          ("block_0_backward", "miss")]
    assert aot_counts() == {"autograd_cache_hit": 0, "autograd_cache_miss": 1, "autograd_cache_saved": 1}
    torch.testing.assert_close(again[1], cold[1])
    monkeypatch.setattr(pipec.backend, "unpickle_layers", real)
    torch._dynamo.reset()
    counters.clear()
    assert [g.cache for g in train_step(model, x)[2].graphs] == [{"aot_autograd": "hit"}] * 2


def test_no_entry_without_early_compile_and_a_users_tag_is_kept():
    """A backward compiled at its first call falls outside the cache's settings: with
    early_compile=False nothing is looked up. A tag of the user's own stays in the key."""
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8)
    for _ in range(2):
        torch._dynamo.reset()
        counters.clear()
        session = train_step(model, x, early_compile=False)[2]
        assert aot_counts()["autograd_cache_hit"] == 0 and all("aot_autograd" not in g.cache for g in session.graphs)
    with torch.compiler.config.patch(cache_key_tag="mine"):
        for outcome in ("miss", "hit"):
            torch._dynamo.reset()
            session = train_step(model, x)[2]
            assert [g.cache.get("aot_autograd") for g in session.graphs] == [outcome] * 2


def test_cache_clear_deletes_pipecs_entries_in_aotautograds_cache(capsys):
    """They would outlive `pipec cache clear` and still serve pipec's graphs; torch's other
    entries stay."""
    from pipec.aot_cache import aot_entries, torch_cache_dir
    from pipec.cli import main

    model, x = Block(), torch.randn(4, 8)
    train_step(model, x)
    (entry,) = aot_entries()
    other = torch_cache_dir() / "aotautograd" / "someone_elses" / "entry"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"an entry of another backend")
    with pytest.raises(SystemExit) as done:
        main(["cache", "clear"])
    assert done.value.code in (0, None)
    assert "and 1 of pipec's from AOTAutograd's cache" in capsys.readouterr().out
    assert aot_entries() == [] and not entry.parent.exists() and other.exists()
    torch._dynamo.reset()
    counters.clear()
    train_step(model, x)
    assert aot_counts()["autograd_cache_hit"] == 0


def test_pipec_logs_tells_what_the_cache_did_with_each_graph(monkeypatch, capsys):
    monkeypatch.setenv("PIPEC_LOGS", "aot_cache")
    model, x = Block(), torch.randn(4, 8)
    try:
        train_step(model, x)
        torch._dynamo.reset()
        train_step(model, x)
    finally:
        monkeypatch.delenv("PIPEC_LOGS")
        pipec.logs.configure_logs()  # the loggers as the other tests expect them
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[pipec.aot_cache]")]
    assert any("graph block_0: AOTAutograd cache miss" in ln for ln in lines), lines
    assert any("graph block_0: Writing AOTAutograd cache entry" in ln for ln in lines), lines
    assert any("graph block_0: AOTAutograd cache hit" in ln for ln in lines), lines


def test_the_tag_names_the_options_and_not_the_load_options():
    registry = get_registry()
    base = cache_tag(pipec.make_options(), registry)
    assert base is not None and base == cache_tag(pipec.make_options(), registry)
    assert cache_tag(pipec.make_options(fusion="none"), registry) != base
    assert cache_tag(pipec.make_options(eager_fallback=False), registry) == base  # front end only
    assert cache_tag(pipec.make_options(cache="none"), registry) is None
    assert cache_tag(pipec.make_options(aot_cache=False), registry) is None


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_sizes_and_constants_are_loaded_with_their_layers(device):
    """Size arguments and size outputs (TensorsOnly, SizeOutputs) and a graph's own tensor
    constants (BoundConstants) are pickled with the entry and put back around the runtime (a
    CUDA constant's bytes read outside AOTAutograd's fake mode). On CUDA, inference: torch
    cannot store a backward graph holding a CUDA constant (it copies it to the host under its
    fake mode, and warns that it is unable to serialize)."""
    train = device == "cpu"

    def f(x):
        scale = torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)  # a constant of the graph
        return (torch.relu(x) * scale).sum(1).softmax(0)

    def step(t):
        x = torch.randn(t, 4, device=device, requires_grad=train)
        with torch.set_grad_enabled(train):
            out = pipec.compile(f, dynamic=True)(x)
        torch.testing.assert_close(out, f(x))
        if train:
            out.square().sum().backward()
            ref = x.detach().clone().requires_grad_()
            f(ref).square().sum().backward()
            torch.testing.assert_close(x.grad, ref.grad)

    torch.manual_seed(0)
    step(5)
    torch._dynamo.reset()
    counters.clear()
    step(7)
    assert aot_counts()["autograd_cache_hit"] == 1


def test_a_padded_classifier_head_is_stored():
    """The head's padding (pipec_capture.vocab_padding) adds nodes to the Dynamo graph before
    AOTAutograd sees it: without the example values Dynamo records, the cache took their
    method calls for calls it cannot vouch for, and BERT's training step was never stored."""
    head = torch.nn.Linear(16, 1030)

    def loss_of(h, labels):
        return torch.nn.functional.cross_entropy(head(h).float().view(-1, 1030), labels.view(-1))

    def step():
        head.zero_grad()
        h, labels = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(0)), torch.arange(6).view(2, 3) * 100
        compiled = pipec.compile(loss_of)
        loss = compiled(h, labels)
        loss.backward()
        assert any(g.fusion_count for g in compiled.pipec_session.graphs)
        return loss.detach(), head.weight.grad.clone()

    cold = step()
    torch._dynamo.reset()
    counters.clear()
    warm = step()
    assert aot_counts()["autograd_cache_hit"] == 1
    torch.testing.assert_close(warm, cold)


def test_a_fallback_warning_is_given_again_on_a_hit():
    def f(x):
        y = (x * 2).expand(4, 8)
        return y.as_strided((3, 3), (1, 2)) + 1

    x = torch.randn(8)
    with pytest.warns(UserWarning, match="as_strided.* runs through torch as an extern call"):
        pipec.compile(f)(x)
    torch._dynamo.reset()
    counters.clear()
    with pytest.warns(UserWarning, match="as_strided.* runs through torch as an extern call"):
        torch.testing.assert_close(pipec.compile(f)(x), f(x))
    assert aot_counts()["autograd_cache_hit"] == 1


def test_the_key_reads_the_custom_passes_registered_for_real_and_restores_torch():
    from torch._inductor import codecache

    from pipec_capture.aot_cache import key_without_inductor_backends

    register, passes = codecache.init_backend_registration, codecache.custom_backend_passes
    mine = object()
    passes["pipec-test-device"], passes["pipec-test-empty"] = mine, None
    try:
        with key_without_inductor_backends():
            assert codecache.init_backend_registration is not register
            codecache.init_backend_registration()  # registers nothing, imports nothing
            values = list(codecache.custom_backend_passes.values())
            assert mine in values and None not in values
        assert (codecache.init_backend_registration, codecache.custom_backend_passes) == (register, passes)
    finally:
        del passes["pipec-test-device"], passes["pipec-test-empty"]


def test_layers_pickle_without_the_runtime_and_an_unpicklable_one_is_not_stored():
    from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

    def runtime(args):
        return [args[0] * 2, None]

    layered = SizeOutputs(TensorsOnly(runtime, [0], [], None), {1: size_function(3, {})})
    back = unpickle_layers(pickle_layers(layered), lambda args: [args[0] + 1, None])
    assert back.pipec_runtime is not runtime
    assert back([torch.ones(2), 5])[0].tolist() == [2.0, 2.0] and back([torch.ones(2), 5])[1] == 3
    graph = CompiledGraph(SizeOutputs(runtime, {1: lambda args: 3}), "forward", "{}", {})
    with pytest.raises(BypassAOTAutogradCache, match="cannot be pickled"):
        graph.prepare_for_serialization()
    assert CompiledGraph(runtime, "forward", "{}", {})([torch.ones(1)])[0].item() == 2.0


def test_a_new_process_loads_the_step_without_tracing_it_again(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from torch._dynamo.utils import counters
        from test_aot_cache import Block, train_step
        torch.manual_seed(0)
        model, x = Block(), torch.randn(4, 8)
        loss, grads, session = train_step(model, x)
        model.zero_grad()
        model(x).square().mean().backward()
        torch.testing.assert_close(grads["up.weight"], model.up.weight.grad)
        print(counters["aot_autograd"]["autograd_cache_hit"], [g.cache for g in session.graphs])
        # a hit's key was made without importing Inductor's code generators (pipec_capture/aot_cache.py),
        # and a cold compile's partition without its lowering (pipec_capture/joint_cse.py)
        print("inductor imported:", [m for m in ("torch._inductor.select_algorithm", "torch._inductor.lowering")
                                     if m in sys.modules])
        # and it is the same key once Inductor has registered them, as it does when it compiles
        from torch._inductor.codegen.common import init_backend_registration
        init_backend_registration()
        torch._dynamo.reset()
        train_step(model, x)
        print("after registration:", counters["aot_autograd"]["autograd_cache_hit"])
    """))
    env = dict(os.environ) if torch.cuda.is_available() else dict(os.environ, TRITON_INTERPRET="1")
    runs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    cold, warm = (r.stdout.splitlines() for r in runs)
    assert cold[0].split()[0] == "0" and warm[0].startswith("1 [{'aot_autograd': 'hit'}")
    assert cold[1:] == ["inductor imported: []", "after registration: 1"]
    assert warm[1:] == ["inductor imported: []", "after registration: 2"]


def test_a_hits_plan_gone_from_the_compile_cache_is_none_with_a_warning():
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8)
    _, _, cold = train_step(model, x)
    torch._dynamo.reset()
    _, _, warm = train_step(model, x)
    assert warm.graphs[0].cache == {"aot_autograd": "hit"}
    entries = list(pathlib.Path(os.environ["PIPEC_CACHE_DIR"]).rglob(cold.graphs[0].plan_key + "*"))
    assert entries
    for entry in entries:  # as evicting the entry would
        entry.unlink()
    with pytest.warns(UserWarning, match="no longer in the compile cache"):
        assert warm.graphs[0].plan is None
    assert warm.graphs[1].plan is not None
