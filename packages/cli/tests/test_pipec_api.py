import copy
import io
import json
import pickle

import pytest
import torch

import pipec
from pipec.api import compare_outputs, make_options


def f(a, b):
    return torch.relu(a) * b + a


def test_compile_matches_eager(fake_stages):
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    compiled = pipec.compile(f)
    torch.testing.assert_close(compiled(a, b), f(a, b))
    assert compiled.pipec_session.kernel_count == 1


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 5))

    def forward(self, a):
        return f(a, self.weight)


def test_compile_leaves_the_module_as_it_was(fake_stages):
    model, twin = Scale(), Scale()
    compiled = pipec.compile(model, recompile_limit=3)
    a = torch.randn(4, 5)
    torch.testing.assert_close(compiled(a), model(a))
    # pipec's state lives on the compiled wrapper, where explain-style stats and the budget are read
    assert compiled.pipec_session.kernel_count == 1 and compiled.pipec_budget.limit == 3
    torch.compile(twin, backend="eager")
    assert set(vars(model)) == set(vars(twin))  # only what torch.compile itself leaves
    for copied in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        torch.testing.assert_close(copied(a), model(a))
    saved = io.BytesIO()
    torch.save(model, saved)
    torch.save(model.state_dict(), io.BytesIO())
    saved.seek(0)
    torch.testing.assert_close(torch.load(saved, weights_only=False)(a), model(a))


def test_compile_as_decorator(fake_stages):
    @pipec.compile(fusion="none")
    def g(a):
        return torch.sigmoid(a) + a

    a = torch.randn(7)
    torch.testing.assert_close(g(a), torch.sigmoid(a) + a)


def test_unknown_names_raise_value_error_at_compile_time(fake_stages):
    with pytest.raises(ValueError, match=r"unknown fusion 'bogus' \(registered: crash, default, invalid, none\)"):
        pipec.compile(f, fusion="bogus")
    with pytest.raises(ValueError, match=r"unknown runtime 'nope' \(registered: cudagraph, launch, wrong\)"):
        pipec.compile(f, runtime="nope")
    with pytest.raises(ValueError, match="unknown mode"):
        pipec.compile(f, mode="fastest")


def test_mode_reduce_overhead_selects_cudagraph(fake_stages):
    assert make_options().runtime == "launch"
    assert make_options(mode="reduce-overhead").runtime == "cudagraph"
    assert make_options(mode="reduce-overhead", runtime="launch").runtime == "launch"
    exhaustive = make_options(mode="max-autotune")  # torch.compile's max-autotune: CUDA Graphs, every candidate
    assert (exhaustive.runtime, exhaustive.get("max_autotune")) == ("cudagraph", True)
    plain = make_options(mode="max-autotune-no-cudagraphs")
    assert (plain.runtime, plain.get("max_autotune")) == ("launch", True)
    assert make_options().get("max_autotune") is None
    opts = make_options(dump_dir="/tmp/x", autotune=False, my_plugin_knob=3)
    assert (opts.dump_dir, opts.autotune, opts.get("my_plugin_knob")) == ("/tmp/x", False, 3)


def test_torch_compile_backend_entry(fake_stages):
    from pipec.backend import pipec_backend

    a, b = torch.randn(3), torch.randn(3)
    compiled = torch.compile(f, backend=pipec_backend)
    torch.testing.assert_close(compiled(a, b), f(a, b))


def test_explain_reports_graph_breaks_and_stats(fake_stages):
    def broken(a, b):
        x = torch.relu(a) * b
        torch._dynamo.graph_break()
        return x + a

    a, b = torch.randn(4, 5), torch.randn(4, 5)
    torch._dynamo.reset()
    report = pipec.explain(broken, a, b)
    assert report.graph_count == 2
    assert report.graph_break_count == 1
    assert len(report.break_reasons) == 1
    # as torch._dynamo.explain words it, read off the graph the backend got (no second trace)
    assert report.break_reasons[0].endswith(f"({__file__}:{broken.__code__.co_firstlineno + 2})")
    assert report.op_count == 3
    assert report.kernel_count == 2
    assert report.fusion_count == 1  # the relu*mul kernel
    assert report.extern_ops == {}
    assert [(a, r) for a, _, r in report.not_fused] == [("relu", "fake: just because")]
    assert set(report.stage_seconds) == {"capture", "fusion", "codegen", "runtime"}
    assert report.max_error == 0.0 and report.mismatch is None
    data = json.loads(report.to_json())
    for key in ("graph_count", "graph_break_count", "break_reasons", "op_count", "kernel_count",
                "fusion_count", "extern_ops", "not_fused", "stage_seconds", "max_error"):
        assert key in data


def test_explain_reports_mismatch(fake_stages):
    torch._dynamo.reset()
    report = pipec.explain(f, torch.randn(3), torch.randn(3), runtime="wrong")
    assert report.max_error == pytest.approx(1.0)
    assert report.mismatch.startswith("output 0 differs from eager: max abs error 1")


def test_explain_raises_pipec_error_on_stage_failure(fake_stages):
    torch._dynamo.reset()
    with pytest.raises(pipec.PipecError, match=r"fusion \(crash\) failed on graph"):
        pipec.explain(f, torch.randn(3), torch.randn(3), fusion="crash")


def test_compare_outputs():
    x = torch.randn(5)
    assert compare_outputs((x, 3), (x.clone(), 3)) == (0.0, None)
    err, problem = compare_outputs(x + 1e-3, x)
    assert err == pytest.approx(1e-3, rel=1e-3) and "differs from eager" in problem
    assert compare_outputs(x.half(), x)[1].startswith("output 0 is torch.float16")
    assert compare_outputs((x,), (x, x))[1] == "compiled model returned 1 outputs, eager 2"
    nan = torch.tensor([float("nan"), 1.0])
    assert compare_outputs(nan, nan.clone()) == (0.0, None)


def test_object_inputs_returned_unchanged_are_passed_through():
    """Under tensor parallel a graph returns its DeviceMesh input (saved for the backward); the
    Program returns None there and the backend puts back the object of this call."""
    from pipec.graph_call import with_object_outputs

    g = torch.fx.Graph()
    x, mesh = g.placeholder("x"), g.placeholder("mesh")
    g.output((g.call_function(torch.neg, (x,)), mesh, x))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    call = with_object_outputs(lambda args: [-args[0], None, args[0]], gm, [torch.randn(2), object()])
    t, m = torch.randn(2), object()
    neg, passed, same = call([t, m])
    assert passed is m and same is t and torch.equal(neg, -t)


def test_size_outputs_and_conditions_on_sizes_are_computed_per_call():
    """A graph returning sizes and conditions on them (torch 2.11's forward graphs return the
    checks `u0 >= 0` their backward asserts): the backend computes each from this call's input
    sizes, since a Program returns None for a non-tensor output."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec.graph_call import with_size_outputs

    gm = make_fx(lambda x: (x * 2, x.shape[0] - 1, x.shape[0] >= 3), tracing_mode="symbolic")(torch.randn(4, 2))
    example = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    call = with_size_outputs(lambda args: [args[0] * 2, None, None], gm, example)
    for rows, big in ((2, False), (5, True)):
        x = torch.randn(rows, 2)
        doubled, less, condition = call([x])
        assert torch.equal(doubled, x * 2) and less == rows - 1 and condition is big


def test_a_graph_that_fails_to_compile_runs_eagerly_with_a_warning(fake_stages):
    """Outside fullgraph a stage failure costs the graph, not the call: it runs eagerly, and one
    warning names the graph and the failure; fullgraph=True raises it."""
    torch._dynamo.reset()
    x, y = torch.randn(3), torch.randn(3)
    compiled = pipec.compile(f, fusion="crash")
    with pytest.warns(pipec.PipecFallbackWarning, match=r"graph f_0 could not be compiled and runs eagerly: "
                                                       r"fusion \(crash\) failed"):
        torch.testing.assert_close(compiled(x, y), f(x, y))
    assert compiled.pipec_session.eager_graphs == 1
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"fusion \(crash\) failed"):
        pipec.compile(f, fusion="crash", fullgraph=True)(x, y)
