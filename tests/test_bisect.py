"""`pipec bisect` and `pipec minify`, against kernels made wrong by a third-party codegen plugin.

The plugin (tests/corrupt_plugin/pipec_corrupt_codegen.py) is installed the way pip lays out a
distribution: a `.dist-info` with an `entry_points.txt` in group `pipec`, on sys.path. pipec
finds it through importlib.metadata like any other plugin (nothing calls register_plugin).
"""

import json
import sys
import textwrap

import pytest
import torch

from conftest import ROOT

PLUGIN = ROOT / "tests" / "corrupt_plugin" / "pipec_corrupt_codegen.py"

# exp -> mul -> sigmoid -> add, a row sum and a tanh: one kernel under the default policy
SMALL = """
import torch

def model(x, y):
    b = torch.sigmoid(torch.exp(x) * y) + x
    return b.sum(-1), torch.tanh(b)

example_inputs = (torch.randn(4, 8), torch.randn(4, 8))
"""

# 30+ nodes once captured, one exp among them
LARGE = """
import torch

def model(x, y):
    a = torch.sin(x) * y + 1.0
    b = torch.cos(a) - x
    c = torch.relu(b * a)
    d = torch.exp(c * 0.1) + torch.tanh(b)
    e = d.sum(-1, keepdim=True) / 8.0
    f = torch.sigmoid(d - e) * a
    g = torch.abs(f) + torch.square(c) - torch.floor(b)
    h = g.amax(-1) + torch.erf(g).mean(-1)
    return h, torch.sqrt(g + 1.0) * torch.cos(f)

example_inputs = (torch.randn(4, 8), torch.randn(4, 8))
"""


@pytest.fixture
def plugin_site(tmp_path):
    """A directory holding the plugin as an installed distribution."""
    site = tmp_path / "site"
    info = site / "pipec_corrupt_codegen-0.1.0.dist-info"
    info.mkdir(parents=True)
    (site / PLUGIN.name).write_text(PLUGIN.read_text())
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pipec-corrupt-codegen\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[pipec]\ncorrupt = pipec_corrupt_codegen\n")
    return site


def _model(tmp_path, source, name="m"):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture
def corrupt_plugin(plugin_site, monkeypatch):
    """The plugin found in this process through its entry point (on sys.path, as pip installs it)."""
    from pipec import plugins

    monkeypatch.syspath_prepend(str(plugin_site))
    plugins.reset_plugins()
    yield
    sys.modules.pop("pipec_corrupt_codegen", None)
    plugins.reset_plugins()


def _main(*args) -> int:
    from pipec.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    return exit_.value.code


def test_bisect_names_the_kernel_and_the_merge_a_plugin_broke(tmp_path, corrupt_plugin, capsys):
    model = _model(tmp_path, SMALL)
    code = _main("bisect", model, "--codegen", "corrupt-fused", "--device", "cpu", "--json", "--no-cache",
                 "--repro-dir", tmp_path / "repros")
    out, err = capsys.readouterr()
    assert code == 1, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "breaks numerics" in errors[0], err
    report = json.loads(out)
    assert report["diverged"] and report["how"] == "alone"
    kernel = report["kernel"]
    assert {"mul", "sigmoid"} <= set(kernel["ops"]), kernel
    assert "0.5 + " in next(iter(kernel["sources"].values()))  # the corrupted source, as it ran
    assert any("sigmoid(" in line for line in kernel["ir"])
    narrowing = report["narrowing"]
    # the merge that first puts the mul and the sigmoid in one kernel, and no other
    assert narrowing["verdict"] == "merge", narrowing
    merge = narrowing["merge"]
    assert "mul" in merge["first_ops"] and merge["second_ops"] == ["sigmoid"], merge
    assert merge["kind"] == "vertical"
    assert sorted(op for k in narrowing["passing_kernels"] for op in k["ops"]) == sorted(
        merge["first_ops"] + merge["second_ops"])
    # the saved inputs reproduce the wrong values with the kernel alone
    from pipec.bisect import replay

    repro = report["repro"]
    saved = torch.load(repro, weights_only=True)
    again = replay(repro)
    assert again.keys() == saved["got"].keys()
    for name, value in again.items():
        torch.testing.assert_close(value, saved["got"][name])


def test_bisect_finds_a_wrong_op_whatever_the_fusion(corrupt_plugin):
    from pipec.api import make_options
    from pipec.bisect import bisect_model

    def model(x, y):
        b = torch.sigmoid(torch.exp(x) * y) + x
        return b.sum(-1), torch.tanh(b)

    report = bisect_model(model, (torch.randn(4, 8), torch.randn(4, 8)),
                          make_options(codegen="corrupt-exp", cache="none"), name="m")
    assert report.diverged and "exp" in report.kernel["ops"]
    assert report.narrowing.verdict == "op"
    assert report.narrowing.kernel["ops"] == ["exp"], report.narrowing.kernel
    assert "that op's code is wrong" in report.summary


def test_bisect_judges_every_kernel_of_a_combo_launch(corrupt_plugin):
    """Two independent small kernels are one combo launch (codegen combo_kernels.py); the wrong
    one is its second member, and bisect still finds it."""
    from pipec.api import make_options
    from pipec.bisect import bisect_model

    def model(x, y):
        return torch.sin(y) * 2.0, torch.exp(x) + 1.0

    report = bisect_model(model, (torch.randn(4, 8), torch.randn(3, 5)),
                          make_options(codegen="corrupt-exp", cache="none"), name="combo")
    assert report.diverged, report.summary
    assert report.kernel["ops"] == ["exp", "add"], report.kernel  # the member that is wrong, not the first
    assert report.kernel["steps"] == ["launch pipec_combo_0"], report.kernel
    assert "kernel pipec_fused_exp_add_1 (exp, add)" in report.summary, report.summary


def test_bisect_exits_0_when_nothing_diverges(tmp_path, capsys):
    model = _model(tmp_path, SMALL)
    code = _main("bisect", model, "--device", "cpu", "--json", "--no-cache", "--repro-dir", tmp_path / "repros")
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads(out)
    assert not report["diverged"] and report["kernel"] is None and "within tolerance" in report["summary"]
    assert not (tmp_path / "repros").exists()


def test_bisect_judges_a_matmul_choice_group_by_its_kernel_outputs():
    """A matmul with an epilogue is a choice group; the values only its library alternatives
    make (cuBLAS's product) are not the kernel's, and are not judged."""
    from pipec.api import make_options
    from pipec.bisect import bisect_model

    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 16).eval()
    report = bisect_model(lambda x: torch.nn.functional.gelu(lin(x)), (torch.randn(4, 8),),
                          make_options(cache="none"), name="linear_gelu")
    assert not report.diverged, report.summary


def test_minify_shrinks_a_30_node_graph_to_a_few_nodes(tmp_path, corrupt_plugin, capsys):
    model = _model(tmp_path, LARGE)
    out = tmp_path / "repro" / "repro.py"
    code = _main("minify", model, "--codegen", "corrupt-exp", "--device", "cpu", "-o", out, "--json")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["original_nodes"] >= 30, result
    assert result["nodes"] <= 5, result["ir"]
    assert result["failure"]["kind"] == "mismatch"
    assert "exp(" in result["ir"]
    from pipec_ir import loads

    graph = loads((tmp_path / "repro" / "repro.graph.json").read_text(), kind="graph")
    assert len(graph.nodes) == result["nodes"]
    # the repro is a model file pipec's commands take, and it still fails
    assert _main("compile", out, "--codegen", "corrupt-exp", "--device", "cpu", "--no-cache") == 1
    assert "differs from eager" in capsys.readouterr().err
    assert _main("compile", out, "--device", "cpu", "--no-cache") == 0  # the built-in codegen is right


def test_minify_shrinks_a_compile_error(tmp_path, corrupt_plugin, capsys):
    from pipec.api import make_options
    from pipec.minify import minify_model, write_repro

    namespace = {}
    exec(textwrap.dedent(LARGE), namespace)
    result = minify_model(namespace["model"], namespace["example_inputs"],
                          make_options(codegen="fail-sigmoid"), name="large")
    assert result.failure.kind == "error" and result.failure.stage == "codegen"
    assert "fail-sigmoid cannot generate sigmoid" in result.failure.message
    assert [n.op for n in result.graph.nodes] == ["sigmoid"], result.graph
    assert result.original_nodes >= 30
    path, data, graph_file = write_repro(result, tmp_path / "repro.py")
    assert _main("compile", path, "--codegen", "fail-sigmoid", "--device", "cpu", "--no-cache") == 1
    assert "fail-sigmoid cannot generate sigmoid" in capsys.readouterr().err


def test_bisect_runs_a_collective_with_its_wait_as_one_unit():
    """A start's pending result is never judged alone, and no start is left unwaited."""
    from pipec.bisect import program_units
    from pipec_ir import Program, Ref, Step, make_attrs

    def ext(target, ins, outs, *args):
        return Step("extern", target, ins, outs, make_attrs(args=(Ref(ins[0]), *args), kwargs=()))

    steps = (ext("_c10d_functional.all_reduce.default", ("x",), ("r",), "sum", "0"),
             Step("launch", "pipec_sin_1", ("y",), ("s",)),
             ext("_c10d_functional.wait_tensor.default", ("r",), ("w",)),
             Step("launch", "pipec_relu_3", ("w",), ("out",)))
    units = program_units(Program("p", (), ("out", "s"), (), (), steps), None)
    assert [[s.target for s in u.steps] for u in units] == [
        ["_c10d_functional.all_reduce.default", "_c10d_functional.wait_tensor.default"],
        ["pipec_sin_1"], ["pipec_relu_3"]]
    assert units[0].reads == ("x",) and units[0].writes == ("r", "w")
