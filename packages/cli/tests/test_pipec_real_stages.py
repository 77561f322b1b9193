"""End to end through the real built-in stages (skipped where they are not installed)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import pipec
import pipec.plugins

from pipec_cli_testing import entry_point, run

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
BUILTIN = {"capture": ("dynamo", "export"), "fusion": ("none", "default", "aggressive"), "codegen": ("triton",),
           "runtime": ("launch", "cudagraph")}


@pytest.fixture
def real_stages(monkeypatch):
    monkeypatch.setenv("PIPEC_DISABLE_PLUGINS", "broken")  # the example plugin's broken entry point, if installed
    pipec.plugins.reset_plugins()
    registry = pipec.plugins.get_registry()
    missing = [f"{stage} {name}" for stage, names in BUILTIN.items() for name in names
               if name not in registry.names(stage)]
    if missing:
        pytest.skip(f"built-in stages not installed: {', '.join(missing)}")
    return registry


def test_registered_by_their_distributions(real_stages):
    dists = {(e.stage, e.name): e.distribution for e in real_stages.entries()}
    assert dists[("capture", "dynamo")] == "pipec-capture"
    assert dists[("fusion", "default")] == "pipec-fusion"
    assert dists[("codegen", "triton")] == "pipec-codegen-triton"
    assert dists[("runtime", "launch")] == "pipec-runtime-cudagraph"


@pytest.mark.parametrize("fusion", ["none", "default", "aggressive"])
def test_pipec_compile_mlp(real_stages, fusion):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(3, 8)
    compiled = pipec.compile(model, fusion=fusion)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def test_explain_softmax(real_stages):
    def f(x):
        return torch.softmax(x * 2.0, dim=-1)

    report = pipec.explain(f, torch.randn(4, 33))
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert report.kernel_count >= 1 and report.op_count >= 3
    assert report.mismatch is None and report.max_error < 1e-5
    json.loads(report.to_json())


def test_explain_lists_each_kernel_and_how_it_runs(real_stages, capsys, tmp_path):
    """Each graph's kernels: kind, shape, ops, and how each runs (a reduction's row held in
    registers or looped; a matmul's alternatives, or a library call). Views are not kernels."""
    def f(x, w):
        return torch.softmax(x, dim=-1), torch.nn.functional.gelu(x @ w) + 1.0, x.t() @ x

    x, w = torch.randn(8, 64), torch.randn(64, 16)
    rows = {r["name"]: r for r in pipec.explain(f, x, w).graphs[0]["kernels"]}
    softmax = next(r for r in rows.values() if "exp" in r["ops"])
    assert softmax["kind"] == "reduction" and softmax["shape"] == ["8", "64"]
    assert softmax["runs_as"] == "Triton, row held in registers"
    epilogue = next(r for r in rows.values() if r["ops"][:1] == ["mm"] and "gelu" in r["ops"])
    assert epilogue["runs_as"].startswith("the fastest of template, library")
    assert any(r["ops"] == ["mm"] and r["runs_as"] == "a library call" for r in rows.values())
    assert all(r["kind"] != "view" for r in rows.values())
    long_rows = pipec.explain(lambda x: torch.softmax(x, dim=-1), torch.randn(2, 40000)).graphs[0]["kernels"]
    assert [r["runs_as"] for r in long_rows] == ["Triton, row looped"]

    path = tmp_path / "softmax_model.py"
    path.write_text("import torch\nmodel = torch.nn.Softmax(-1)\nexample_inputs = (torch.randn(4, 32),)\n")
    code, out, err = run(["explain", path], capsys)
    assert code == 0, err
    words = out.split()  # the table wraps at the terminal's width
    assert all(w in words for w in ("kernel", "kind", "ops", "reduction", "held", "registers"))


def test_cli_compile_example(real_stages, capsys):
    code, out, err = run(["compile", EXAMPLES / "mlp_gelu.py", "--json", "--output-code"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["ok"] and data["kernel_count"] >= 1 and data["fusion_count"] >= 1
    assert all("@triton.jit" in k["source"] for k in data["kernels"])


def test_cli_stage_by_stage(real_stages, capsys, tmp_path):
    graph, plan, program = tmp_path / "g.json", tmp_path / "p.json", tmp_path / "prog.json"
    assert run(["capture", EXAMPLES / "norm_softmax.py", "-o", graph], capsys)[0] == 0
    assert run(["fuse", graph, "-o", plan, "--fusion", "aggressive"], capsys)[0] == 0
    code, out, err = run(["codegen", plan, "-o", program, "--text"], capsys)
    assert code == 0, err
    assert "@triton.jit" in out
    g = json.loads(graph.read_text())["document"]
    assert any(i["role"] == "parameter" for i in g["inputs"])  # weights are named inputs, not data


def test_cautious_example_plugin_end_to_end(real_stages, use_entry_points, example_plugin_path, capsys):
    eps = list(pipec.plugins._entry_points()) + [entry_point("cautious", "pipec_example_plugin.cautious")]
    use_entry_points(eps)
    code, out, err = run(["explain", EXAMPLES / "norm_softmax.py", "--fusion", "cautious", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["ok"] and data["options"]["fusion"] == "cautious"
    assert any("cautious" in r["reason"] for r in data["not_fused"])


def test_watch_example_plugin_wraps_the_builtin_launch_runtime(real_stages, use_entry_points, example_plugin_path):
    """tests/plugin_pkg's `watch` wraps `launch` in pipec_configure: it sees every load, results are launch's."""
    eps = [ep for ep in pipec.plugins._entry_points() if ep.name != "watch"]  # an installed copy, if any
    use_entry_points(eps + [entry_point("watch", "pipec_example_plugin.watch")])
    entry = pipec.plugins.get_registry().entry("runtime", "launch")
    assert entry.wrapped_by == ("watch",)
    assert entry.distribution == "pipec-runtime-cudagraph"  # still the built-in's entry
    assert type(entry.impl.inner).__name__ == "LaunchRuntime"

    def model(x, w):
        return torch.softmax(x @ w, dim=-1) * 2.0

    x, w = torch.randn(4, 8), torch.randn(8, 6)
    compiled = pipec.compile(model, runtime="launch", cache="none")
    torch.testing.assert_close(compiled(x, w), model(x, w))
    assert len(entry.impl.loaded) == 1 and entry.impl.loaded[0][1] >= 1  # one graph, its steps


@pytest.mark.skipif(shutil.which("pipec") is None, reason="pipec console script not installed")
def test_console_script(real_stages):
    env = dict(os.environ, PIPEC_DISABLE_PLUGINS="broken")
    proc = subprocess.run(["pipec", "compile", str(EXAMPLES / "norm_softmax.py"), "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"]
