"""The `pipec` command: stage-by-stage IR files, errors, plugins."""

import json
import subprocess
import textwrap
import sys

import pytest
from pipec_ir import dumps, loads

from conftest import ROOT

MLP = str(ROOT / "examples" / "mlp_gelu.py")


def pipec(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pipec", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=_env())


def _env():
    import os

    env = dict(os.environ)
    return env


def test_stage_by_stage_files_round_trip(tmp_path):
    g, p, prog = tmp_path / "g.json", tmp_path / "p.json", tmp_path / "prog.json"
    assert pipec("capture", MLP, "-o", g).returncode == 0
    r = pipec("fuse", g, "-o", p)
    assert r.returncode == 0, r.stderr
    r = pipec("codegen", p, "-o", prog)
    assert r.returncode == 0, r.stderr
    for path, kind in ((g, "graph"), (p, "kernel_plan"), (prog, "program")):
        text = path.read_text()
        doc = loads(text, kind=kind)
        assert loads(dumps(doc)) == doc
        assert json.loads(text)["kind"] == kind
    # the same captured graph with its first GELU declared [3, 3]: bad input (exit 2, one line
    # naming the node), where a wrong declared type used to fuse and compile
    data = json.loads(g.read_text())
    node = next(n for n in data["document"]["nodes"] if n["op"] == "gelu")
    node["type"]["shape"] = ["3", "3"]
    g.write_text(json.dumps(data))
    r = pipec("fuse", g, "-o", tmp_path / "bad_plan.json")
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert errors[0].startswith(f"error: {g}: graph {data['document']['name']}, node {node['name']} (gelu): "
                                "declared float32[3, 3], but gelu("), errors[0]
    assert errors[0].endswith("gives float32[8, 64]"), errors[0]


@pytest.mark.parametrize("damage", ["truncate", "field"])
def test_broken_ir_file_is_one_line_error(tmp_path, damage):
    g = tmp_path / "g.json"
    assert pipec("capture", MLP, "-o", g).returncode == 0
    text = g.read_text()
    text = text[: len(text) // 2] if damage == "truncate" else text.replace('"op":"', '"op":1,"x":"', 1)
    g.write_text(text)
    r = pipec("fuse", g, "-o", tmp_path / "p.json")
    assert r.returncode in (1, 2)
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_compile_json_reports_small_error():
    r = pipec("compile", MLP, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["max_error"] < 1e-4
    assert data["kernel_count"] >= 1


@pytest.mark.parametrize("args, needle", [
    (("compile", "missing.py"), "missing.py"),
    (("compile", MLP, "--fusion", "nope"), "nope"),
    (("compile", MLP, "--model", "nothing_here"), "nothing_here"),
])
def test_usage_errors_exit_2_with_one_line(args, needle):
    r = pipec(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert needle in r.stderr


def test_model_file_without_model(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import torch\nexample_inputs = (torch.randn(2),)\n")
    r = pipec("compile", f)
    assert r.returncode == 2 and "model" in r.stderr and "Traceback" not in r.stderr


def test_a_model_dynamo_cannot_trace_is_a_one_line_error_with_dynamos_reason(tmp_path):
    """`pipec compile` reports what it cannot compile (no eager fallback): Dynamo's failure is one
    line naming the op and the reason from Dynamo's explanation, exit 1, no traceback."""
    f = tmp_path / "m.py"
    f.write_text(textwrap.dedent(f"""
        import sys
        import torch
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from test_dynamo_failures import Outer  # an op with no shape function, before a module

        model = Outer()
        example_inputs = (torch.randn(4, 8),)
    """))
    r = pipec("compile", f)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len(errors) == 1 and "plus_one" in errors[0] and "no shape function" in errors[0]
