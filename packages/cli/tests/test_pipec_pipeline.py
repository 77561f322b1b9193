
import pytest
import torch

import pipec_ir
from pipec import PipecError, Session, compile_graph
from pipec.pipeline import PIPELINE, STAGE_NAMES


def tiny(a, b):
    return torch.relu(a) * b + a


def traced():
    return torch.fx.symbolic_trace(tiny), [torch.randn(4, 5), torch.randn(4, 5)]


def test_pipeline_is_a_flat_named_list():
    assert STAGE_NAMES == ("capture", "fusion", "codegen", "runtime")
    assert [s.kind for s in PIPELINE] == ["graph", "kernel_plan", "program", None]


def test_compile_graph_runs_every_stage(fake_stages):
    gm, inputs = traced()
    session = Session()
    fn = compile_graph(gm, inputs, pipec_ir.CompileOptions(), session=session, name="tiny")
    out = fn(inputs)
    torch.testing.assert_close(out[0], tiny(*inputs))
    [stats] = session.graphs
    assert stats.name == "tiny"
    assert stats.op_count == 3
    assert stats.kernel_count == 1
    assert stats.fusion_count == 1  # one kernel holding relu, mul, add
    assert stats.not_fused == [("relu", "add", "fake: just because")]
    assert set(stats.stage_seconds) == set(STAGE_NAMES)


def test_stages_only_see_serialized_documents(fake_stages, monkeypatch):
    import fake_stages as fs

    seen = {}
    orig_capture, orig_fuse = fs.FakeCapture.capture, fs.FakeFusion.fuse

    def capture(self, gm, example_inputs, options):
        seen["captured"] = orig_capture(self, gm, example_inputs, options)
        return seen["captured"]

    def fuse(self, graph, options):
        seen["fused_input"] = graph
        return orig_fuse(self, graph, options)

    monkeypatch.setattr(fs.FakeCapture, "capture", capture)
    monkeypatch.setattr(fs.FakeFusion, "fuse", fuse)
    gm, inputs = traced()
    compile_graph(gm, inputs, pipec_ir.CompileOptions())
    assert seen["fused_input"] == seen["captured"]
    assert seen["fused_input"] is not seen["captured"]


def test_dump_ir_writes_json_and_text_per_stage(fake_stages, tmp_path):
    gm, inputs = traced()
    opts = pipec_ir.CompileOptions(dump_dir=str(tmp_path / "ir"))
    compile_graph(gm, inputs, opts, name="tiny")
    names = sorted(p.name for p in (tmp_path / "ir").iterdir())
    assert names == ["tiny.capture.json", "tiny.capture.txt", "tiny.codegen.json", "tiny.codegen.txt",
                     "tiny.fusion.json", "tiny.fusion.txt"]
    graph = pipec_ir.loads((tmp_path / "ir" / "tiny.capture.json").read_text(), kind="graph")
    assert [n.op for n in graph.nodes] == ["relu", "mul", "add"]
    assert "relu(" in (tmp_path / "ir" / "tiny.capture.txt").read_text()


def test_graph_names_are_unique_within_a_session(fake_stages, tmp_path):
    session = Session()
    opts = pipec_ir.CompileOptions(dump_dir=str(tmp_path))
    for _ in range(2):
        gm, inputs = traced()
        compile_graph(gm, inputs, opts, session=session, name="g")
    assert [g.name for g in session.graphs] == ["g", "g_1"]
    assert (tmp_path / "g_1.fusion.json").exists()


def test_stage_errors_name_stage_impl_and_graph(fake_stages):
    gm, inputs = traced()
    with pytest.raises(PipecError) as info:
        compile_graph(gm, inputs, pipec_ir.CompileOptions(fusion="crash"), name="tiny")
    assert str(info.value) == "fusion (crash) failed on graph tiny: RuntimeError: fake fusion crashed"
    assert (info.value.stage, info.value.impl, info.value.graph) == ("fusion", "crash", "tiny")


def test_invalid_document_is_caught_at_its_boundary(fake_stages):
    gm, inputs = traced()
    with pytest.raises(PipecError, match=r"^fusion \(invalid\) failed on graph tiny: produced an invalid "
                                         r"kernel_plan document: VerifyError"):
        compile_graph(gm, inputs, pipec_ir.CompileOptions(fusion="invalid"), name="tiny")


def test_unknown_stage_name_is_a_pipec_error(fake_stages):
    gm, inputs = traced()
    with pytest.raises(PipecError, match=r"codegen \(cuda\).*registered: triton"):
        compile_graph(gm, inputs, pipec_ir.CompileOptions(codegen="cuda"))


def test_ir_documents_start_at_the_next_stage(fake_stages):
    gm, inputs = traced()
    graph = compile_graph(gm, inputs, pipec_ir.CompileOptions(), stop_after="capture")
    assert isinstance(graph, pipec_ir.Graph)
    plan = compile_graph(graph, (), pipec_ir.CompileOptions(), stop_after="fusion")
    assert isinstance(plan, pipec_ir.KernelPlan)
    program = compile_graph(plan, (), pipec_ir.CompileOptions(), stop_after="codegen")
    assert isinstance(program, pipec_ir.Program)
    fn = compile_graph(program, ())
    torch.testing.assert_close(fn(inputs)[0], tiny(*inputs))


def test_the_runtime_gets_the_models_load_context_and_options_without_it(fake_stages, monkeypatch, tmp_path):
    """A runtime whose `load` takes `context` gets the session's LoadContext (one per model: every
    graph gets the same one); `kernel_dir` and `tuning_cache` move from the options into it, and
    $PIPEC_KERNEL_DIR is read here, in the front end. A runtime whose `load` has no `context`
    (FakeRuntime, as written before LoadContext) is still called with (program, options)."""
    import fake_stages as fs

    seen = []
    plain_load = fs.FakeRuntime.load

    def load(self, program, options, context=None):
        seen.append((options, context))
        return plain_load(self, program, options)

    monkeypatch.setattr(fs.FakeRuntime, "load", load)
    monkeypatch.setenv("PIPEC_KERNEL_DIR", str(tmp_path / "env"))
    session = Session()
    gm, inputs = traced()
    options = pipec_ir.CompileOptions().with_extra(tuning_cache=False, block=4)
    for _ in range(2):
        fn = compile_graph(gm, inputs, options, session=session)
        torch.testing.assert_close(fn(inputs)[0], tiny(*inputs))
    (first_options, first), (_, second) = seen
    assert first is second is session.context
    assert (first.kernel_dir, first.tuning_cache, first.profile) == (str(tmp_path / "env"), False, session.profile)
    # a plugin's option stays, the context's left; the runtime also learns the graph's name (profiler ranges)
    assert dict(first_options.extra) == {"block": 4, "graph_name": session.graphs[0].name}
    explicit = compile_graph(gm, inputs, options.with_extra(kernel_dir=str(tmp_path / "k")))
    torch.testing.assert_close(explicit(inputs)[0], tiny(*inputs))
    assert seen[-1][1].kernel_dir == str(tmp_path / "k")  # the option wins over the environment
    assert first.compile_workers is None  # the runtime's default pool of compile workers


def test_compile_workers_come_from_the_option_else_the_environment(monkeypatch):
    """`compile_workers` (else $PIPEC_COMPILE_WORKERS) goes into the LoadContext, never into the
    options a stage sees or a cache key; a bad value is one clear error."""
    from pipec.errors import PipecConfigError
    from pipec.options import make_options
    from pipec.pipeline import LOAD_CONTEXT_OPTIONS, make_load_context

    monkeypatch.setenv("PIPEC_COMPILE_WORKERS", "3")
    assert make_load_context(pipec_ir.CompileOptions()).compile_workers == 3
    options = make_options(compile_workers=0)
    assert make_load_context(options).compile_workers == 0  # the option wins: no worker processes
    assert "compile_workers" in LOAD_CONTEXT_OPTIONS and options.without(*LOAD_CONTEXT_OPTIONS).key() == \
        make_options().key()
    monkeypatch.setenv("PIPEC_COMPILE_WORKERS", "many")
    with pytest.raises(PipecConfigError, match="PIPEC_COMPILE_WORKERS='many'"):
        make_load_context(pipec_ir.CompileOptions())
    with pytest.raises(ValueError, match="compile_workers must be a non-negative integer"):
        make_options(compile_workers=-1)


def test_torchrun_ranks_share_the_hosts_compile_workers(monkeypatch):
    """Under torchrun ($LOCAL_WORLD_SIZE) each rank gets its share of the host's cores, not one
    worker per core each; $PIPEC_COMPILE_WORKERS still wins."""
    from pipec.pipeline import make_load_context

    monkeypatch.delenv("PIPEC_COMPILE_WORKERS", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert make_load_context(pipec_ir.CompileOptions()).compile_workers == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert make_load_context(pipec_ir.CompileOptions()).compile_workers == 0  # 2 cores each: not worth it
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert make_load_context(pipec_ir.CompileOptions()).compile_workers is None  # the runtime's default
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setenv("PIPEC_COMPILE_WORKERS", "6")
    assert make_load_context(pipec_ir.CompileOptions()).compile_workers == 6


def test_a_runtime_without_context_is_called_as_before(fake_stages):
    gm, inputs = traced()
    fn = compile_graph(gm, inputs, pipec_ir.CompileOptions().with_extra(kernel_dir="/nonexistent"))
    torch.testing.assert_close(fn(inputs)[0], tiny(*inputs))


def test_the_session_counts_stages_in_the_pipelines_order():
    from pipec.session import STAGE_ORDER

    assert STAGE_ORDER == STAGE_NAMES


def test_a_deferred_plan_that_cannot_be_read_leaves_empty_counts_with_one_warning():
    import warnings

    from pipec.session import GraphStats

    stats = GraphStats("g")

    def broken():
        raise ValueError("truncated")

    stats.defer(broken)
    with pytest.warns(UserWarning, match="graph g: its cached plan could not be read"):
        assert stats.fusion_count == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (stats.units, stats.not_fused, stats.kernel_rows) == (None, [], [])


def test_a_deferred_plan_is_parsed_once_at_the_first_read():
    from pipec.session import GraphStats

    calls = []
    stats = GraphStats("g")
    stats.defer(lambda: calls.append(1))  # a parse that found nothing (the cache warned)
    assert calls == [] and stats.name == "g" and stats.cache == {}  # not derived from the plan
    assert stats.op_count == 0 and stats.extern_ops == [] and calls == [1]
    assert stats.fusion_count == 0 and calls == [1]
