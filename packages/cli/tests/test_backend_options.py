"""Options the capture needs before AOTAutograd runs reach it under torch.compile."""

import pytest
import torch
import torch.nn.functional as F

import pipec


def attend(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def test_decompose_attention_reaches_the_dynamo_backend():
    q = torch.randn(1, 2, 8, 4)
    default = pipec.explain(attend, q, q, q)
    assert any("attention" in op for op in default.extern_ops)  # one library call
    torch._dynamo.reset()
    decomposed = pipec.explain(attend, q, q, q, decompose_attention=True)
    assert not any("attention" in op for op in decomposed.extern_ops)  # pipec's own kernels
    assert decomposed.kernel_count > default.kernel_count
    assert decomposed.max_error is not None and decomposed.mismatch is None


def test_a_capture_whose_dynamo_backend_takes_no_options_still_works():
    from pipec.backend import aten_backend

    seen = []

    def old_style(compile_aten_graph):
        seen.append(compile_aten_graph)
        return "backend"

    assert aten_backend(old_style, "compile", options=None) == "backend" and seen == ["compile"]
    assert aten_backend(old_style, "compile", None, profile="recorder") == "backend"  # a profile it cannot take


def test_a_capture_that_takes_a_profile_gets_the_sessions():
    """The built-in capture times its device checks in the session's compile-time profile (their
    own part, not AOTAutograd's); one taking options but no profile is called as before."""
    from pipec.backend import aten_backend

    seen = []

    def with_profile(compile_aten_graph, options=None, profile=None):
        seen.append(profile)
        return "backend"

    def with_options(compile_aten_graph, options=None):
        seen.append(options)
        return "backend"

    aten_backend(with_profile, "compile", "opts", profile="recorder")
    aten_backend(with_profile, "compile", "opts")
    aten_backend(with_options, "compile", "opts", profile="recorder")
    assert seen == ["recorder", None, "opts"]


def test_the_runtime_is_warmed_when_a_graph_reaches_pipec():
    """A runtime's optional `warm(context)` is called before the graph is lowered (pipec's starts its
    compile workers there); one that raises does not fail the compile."""
    registry = pipec.get_registry()
    saved = registry.snapshot()
    calls = []

    class Warmed:
        def __init__(self, inner):
            self.inner = inner

        def load(self, program, options, context=None):
            return self.inner.load(program, options, context)

        def warm(self, context):
            calls.append(context)

    class FailsToWarm(Warmed):
        def warm(self, context):
            raise RuntimeError("cannot warm")

    def f(x):
        return x.sin() * 2 + 1

    x = torch.randn(8, 16)
    try:
        launch = registry.get("runtime", "launch")
        registry.add_runtime("warmed", Warmed(launch))
        registry.add_runtime("fails-to-warm", FailsToWarm(launch))
        for name in ("warmed", "fails-to-warm"):
            torch._dynamo.reset()
            torch.testing.assert_close(pipec.compile(f, runtime=name, cache="none")(x), f(x))
    finally:
        registry.restore(saved)
    assert len(calls) == 1 and calls[0] is not None  # the model's LoadContext


def test_the_eager_fallback_runs_the_graph_as_traced_not_as_the_capture_rewrote_it():
    """A capture may rewrite the Dynamo graph in place (pipec's sends attention to its own kernel)
    and then fail; the graph that runs eagerly is then the one Dynamo traced."""
    registry = pipec.get_registry()
    saved = registry.snapshot()

    class RewritesThenFails:
        def capture(self, gm, example_inputs, options):
            raise AssertionError("not reached under torch.compile")

        def dynamo_backend(self, compile_aten_graph, options=None):
            def backend(gm, example_inputs):
                for node in gm.graph.nodes:  # sin -> cos, in place, as a rewrite gone wrong
                    if node.op == "call_method" and node.target == "sin":
                        node.target = "cos"
                gm.recompile()
                raise RuntimeError("capture failed after its rewrite")
            return backend

    def f(x):
        return x.sin() * 2

    x = torch.randn(4, 8)
    try:
        registry.add_capture("rewrites-then-fails", RewritesThenFails())
        torch._dynamo.reset()
        with pytest.warns(pipec.PipecFallbackWarning, match="runs eagerly: .*capture failed after its rewrite"):
            got = pipec.compile(f, capture="rewrites-then-fails", cache="none")(x)
    finally:
        registry.restore(saved)
        torch._dynamo.reset()
    torch.testing.assert_close(got, f(x))


@pytest.mark.parametrize("cache", [None, "none"])
def test_the_capture_gets_a_directory_for_its_device_checks_beside_a_local_cache(cache, monkeypatch, tmp_path):
    """Option `device_checks_dir`: `checks` in the local compile cache's directory (where the
    capture keeps its cuDNN attention verdict across processes); none without a local cache."""
    import pipec_capture.plugin as capture_plugin

    monkeypatch.setenv("PIPEC_CACHE_DIR", str(tmp_path / "cache"))
    seen, real = [], capture_plugin.make_dynamo_backend

    def recording(*args, **kwargs):
        seen.append(kwargs.get("verdicts_dir"))
        return real(*args, **kwargs)

    monkeypatch.setattr(capture_plugin, "make_dynamo_backend", recording)
    torch._dynamo.reset()
    x = torch.randn(8)
    options = {} if cache is None else {"cache": cache}
    torch.testing.assert_close(pipec.compile(lambda t: t.sin() + 1, **options)(x), x.sin() + 1)
    assert seen == [str(tmp_path / "cache" / "checks") if cache is None else None]
