import json
import re
import shutil
import subprocess

import pytest

import pipec_ir
from pipec_cli_testing import run, one_error_line


# ---------------------------------------------------------------- usage errors -> exit 2, one line


def test_missing_model_file(fake_stages, capsys, tmp_path):
    code, _, err = run(["compile", tmp_path / "nope.py"], capsys)
    assert code == 2
    assert "not found" in one_error_line(err)


def test_model_file_without_model(fake_stages, capsys, tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import torch\nexample_inputs = (torch.ones(2),)\n")
    code, _, err = run(["compile", path], capsys)
    assert code == 2
    assert one_error_line(err) == "error: m.py defines no `model` (use --model NAME)"


def test_model_file_without_inputs_and_other_names(fake_stages, capsys, tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import torch\nnet = torch.relu\ninp = lambda: (torch.ones(2),)\n")
    code, _, err = run(["compile", path, "--model", "net"], capsys)
    assert code == 2
    assert one_error_line(err) == "error: m.py defines no `example_inputs` (use --inputs NAME)"
    code, out, err = run(["compile", path, "--model", "net", "--inputs", "inp", "--device", "cpu"], capsys)
    assert code == 0, err


def test_model_file_that_fails_to_import(fake_stages, capsys, tmp_path):
    path = tmp_path / "m.py"
    path.write_text("raise ValueError('bad model file')\n")
    code, _, err = run(["compile", path], capsys)
    assert code == 2
    assert one_error_line(err) == "error: importing m.py failed: ValueError: bad model file"


def test_bad_example_inputs(fake_stages, capsys, tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import torch\nmodel = torch.relu\nexample_inputs = 3\n")
    code, _, err = run(["compile", path], capsys)
    assert code == 2
    assert "must be a tuple of tensors" in one_error_line(err)


def test_unknown_flag_and_bad_mode(fake_stages, capsys, model_file):
    code, _, err = run(["compile", model_file, "--bogus"], capsys)
    assert code == 2
    assert "--bogus" in one_error_line(err)
    code, _, err = run(["compile", model_file, "--mode", "fastest"], capsys)
    assert code == 2
    assert "fastest" in one_error_line(err)


@pytest.mark.parametrize("flag", ["--fusion", "--runtime", "--codegen", "--capture"])
def test_unknown_plugin_name(fake_stages, capsys, model_file, flag):
    code, _, err = run(["compile", model_file, flag, "zzz"], capsys)
    assert code == 2
    assert "unknown" in one_error_line(err) and "'zzz' (registered:" in err


# ---------------------------------------------------------------- bad option values: exit 2 before any work


@pytest.fixture
def watched_model(tmp_path):
    """A model file that leaves a marker when it is imported: (path, marker)."""
    marker = tmp_path / "imported"
    path = tmp_path / "watched.py"
    path.write_text(f"import pathlib\nimport torch\npathlib.Path({str(marker)!r}).write_text('yes')\n"
                    "def model(a):\n    return torch.relu(a)\nexample_inputs = (torch.randn(3),)\n")
    return path, marker


@pytest.mark.parametrize("command", ["compile", "explain", "bench", "export", "run", "bisect", "minify"])
def test_bad_device_is_refused_before_any_work(fake_stages, capsys, watched_model, tmp_path, command):
    path, marker = watched_model
    argv = {"export": ["export", path, "-o", tmp_path / "m.pipec"], "minify": ["minify", path, "-o", tmp_path / "r.py"],
            "run": ["run", tmp_path / "missing.pipec", "--random"]}.get(command, [command, path])
    code, _, err = run([*argv, "--device", "tpu"], capsys)
    assert code == 2
    assert one_error_line(err) == "error: --device 'tpu': expected auto, cpu, cuda or cuda:N"
    assert not marker.exists()


def test_unwritable_dump_ir_is_one_line_naming_the_path(fake_stages, capsys, watched_model, tmp_path):
    path, marker = watched_model
    (tmp_path / "plain").write_text("a file")  # a directory below a file: unwritable even for root
    for command in (["compile", path], ["explain", path], ["export", path, "-o", tmp_path / "m.pipec"]):
        code, _, err = run([*command, "--dump-ir", tmp_path / "plain" / "ir"], capsys)
        assert code == 2
        assert one_error_line(err) == (f"error: --dump-ir '{tmp_path / 'plain' / 'ir'}': cannot create the "
                                       f"directory (Not a directory)")
        code, _, err = run([*command, "--dump-ir", tmp_path / "plain"], capsys)
        assert code == 2
        assert one_error_line(err) == f"error: --dump-ir '{tmp_path / 'plain'}' is a file, not a directory"
    assert not marker.exists()


def test_unwritable_dump_dir_through_the_api_names_the_path(fake_stages, tmp_path):
    import pipec
    import torch

    (tmp_path / "plain").write_text("a file")
    compiled = pipec.compile(torch.relu, dump_dir=str(tmp_path / "plain" / "ir"))
    with pytest.raises(Exception, match=r"cannot write the IR of graph relu_0 to dump_dir '.*/plain/ir': "
                                        r"Not a directory"):
        compiled(torch.randn(3))


@pytest.mark.parametrize("argv, message", [
    (["--warmup", "nan"], "--warmup must be a finite number >= 0, got nan"),
    (["--rep", "inf"], "--rep must be a finite number > 0, got inf"),  # timed forever before
    (["--rep", "0"], "--rep must be a finite number > 0, got 0.0"),
    (["--atol", "-1", "--rtol", "0"], "--atol must be a finite number >= 0, got -1.0"),
    (["--atol", "0", "--rtol", "nan"], "--rtol must be a finite number >= 0, got nan"),
])
def test_bench_refuses_non_finite_times_and_tolerances(fake_stages, capsys, watched_model, argv, message):
    path, marker = watched_model
    code, _, err = run(["bench", path, *argv], capsys)
    assert code == 2
    assert one_error_line(err) == f"error: {message}"
    assert not marker.exists()


def test_unwritable_output_files_are_refused_before_any_work(fake_stages, capsys, watched_model, tmp_path):
    path, marker = watched_model
    (tmp_path / "plain").write_text("a file")
    bad = tmp_path / "plain" / "out"
    for argv, flag in ((["bench", path, "-o", bad], "--output"), (["export", path, "-o", bad], "--output"),
                       (["run", tmp_path / "missing.pipec", "--random", "--save-outputs", bad], "--save-outputs")):
        code, _, err = run(argv, capsys)
        assert code == 2
        assert one_error_line(err) == f"error: {flag} '{bad}': '{tmp_path / 'plain'}' is not a directory"
    code, _, err = run(["run", tmp_path / "missing.pipec", "--random", "--save-outputs", tmp_path], capsys)
    assert code == 2
    assert one_error_line(err) == f"error: --save-outputs '{tmp_path}' is a directory, not a file"
    assert not marker.exists()


def test_run_seed_out_of_range(fake_stages, capsys, tmp_path):
    code, _, err = run(["run", tmp_path / "m.pipec", "--random", "--seed", str(2**64)], capsys)
    assert code == 2
    assert "--seed" in one_error_line(err)


def test_compile_with_a_capture_dynamo_cannot_run_is_a_usage_error(capsys, watched_model):
    path, marker = watched_model  # the built-in stages: capture 'export' is torch.export only
    code, _, err = run(["compile", path, "--capture", "export"], capsys)
    assert code == 2
    assert one_error_line(err).startswith("error: --capture export: it cannot run under torch.compile")
    assert not marker.exists()


def test_an_error_wrapped_by_dynamo_is_reported_by_its_inner_line():
    from pipec.exits import one_line

    class BackendCompilerFailed(Exception):
        def __init__(self, inner):
            super().__init__("backend='backend' raised:\n" + f"{type(inner).__name__}: {inner}")
            self.inner_exception = inner

    assert one_line(BackendCompilerFailed(OSError("disk full"))) == "OSError: disk full"


def test_unexpected_error_is_one_line_and_the_traceback_only_on_request(fake_stages, capsys, monkeypatch,
                                                                        model_file):
    import pipec.commands.compile

    def broken(*args, **kwargs):
        raise KeyError("surprise")

    monkeypatch.setattr(pipec.commands.compile, "load_model_file", broken)
    code, _, err = run(["compile", model_file], capsys)
    assert code == 1
    assert one_error_line(err) == ("error: KeyError: 'surprise' (unexpected; PIPEC_TRACEBACK=1 prints "
                                   "the traceback)")
    monkeypatch.setenv("PIPEC_TRACEBACK", "1")
    code, _, err = run(["compile", model_file], capsys)
    assert code == 1 and "Traceback" in err and "KeyError: 'surprise'" in err


# ---------------------------------------------------------------- IR files


@pytest.fixture
def graph_file(fake_stages, capsys, model_file, tmp_path):
    path = tmp_path / "graph.json"
    code, _, err = run(["capture", model_file, "-o", path], capsys)
    assert code == 0, err
    return path


def test_stage_by_stage(graph_file, capsys, tmp_path):
    graph = pipec_ir.loads(graph_file.read_text(), kind="graph")
    assert [n.op for n in graph.nodes] == ["relu", "mul", "add"]
    code, _, err = run(["fuse", graph_file, "-o", tmp_path / "plan.json", "--fusion", "none"], capsys)
    assert code == 0, err
    assert pipec_ir.loads((tmp_path / "plan.json").read_text(), kind="kernel_plan").policy == "fake"
    code, out, err = run(["codegen", tmp_path / "plan.json", "-o", tmp_path / "prog.json", "--text"], capsys)
    assert code == 0, err
    assert pipec_ir.loads((tmp_path / "prog.json").read_text(), kind="program").kernels
    assert "fake_kernel_0" in out


def test_capture_with_dynamo_exporter(fake_stages, capsys, model_file, tmp_path):
    code, _, err = run(["capture", model_file, "-o", tmp_path / "g.json", "--exporter", "dynamo"], capsys)
    assert code == 0, err
    assert len(pipec_ir.loads((tmp_path / "g.json").read_text(), kind="graph").nodes) == 3


@pytest.mark.parametrize("damage", ["truncate", "garbage", "version", "kind", "field"])
def test_broken_ir_file_exits_2_with_one_line(graph_file, capsys, tmp_path, damage):
    text = graph_file.read_text()
    bad = tmp_path / "bad.json"
    if damage == "truncate":
        bad.write_text(text[: len(text) // 2])
    elif damage == "garbage":
        bad.write_bytes(b"\xff\xfe not json")
    elif damage == "version":
        bad.write_text(re.sub(r'"version":\[1,\d+\]', '"version":[9,0]', text))
    elif damage == "kind":
        bad = graph_file  # a graph where a plan is expected
    elif damage == "field":
        data = json.loads(text)
        del data["document"]["nodes"][0]["op"]
        bad.write_text(json.dumps(data))
    cmd = ["codegen", bad, "-o", tmp_path / "x.json"] if damage == "kind" else ["fuse", bad, "-o", tmp_path / "x.json"]
    code, _, err = run(cmd, capsys)
    assert code == 2
    line = one_error_line(err)
    assert str(bad) in line
    assert not (tmp_path / "x.json").exists()


def _set_node(data, name, **fields):
    for node in data["nodes"]:
        if node["name"] == name:
            node.update(fields)


@pytest.mark.parametrize("damage, needle", [
    ("output shape", "node add (add): declared float32[3, 3], but add(mul: float32[4, 5], arg0: float32[4, 5]) "
                     "gives float32[4, 5]"),
    ("dtype", "node relu (relu): declared float16[4, 5], but relu(arg0: float32[4, 5]) gives float32[4, 5]"),
    ("input shape", "node relu (relu): declared float32[4, 5], but relu(arg0: float32[4, 6]) gives float32[4, 6]"),
    ("attribute", "node s (sum): attribute dims='two' must be a list of integers"),
])
def test_self_contradicting_ir_file_exits_2_naming_the_node(graph_file, capsys, tmp_path, damage, needle):
    """A Graph whose declared types disagree with its ops is bad input (exit 2, one line), not a
    fusion failure, and never reaches codegen (which would return a [3, 3] tensor)."""
    data = json.loads(graph_file.read_text())
    doc = data["document"]
    if damage == "output shape":
        _set_node(doc, "add", type={"shape": ["3", "3"], "dtype": "float32"})
    elif damage == "dtype":
        _set_node(doc, "relu", type={"shape": ["4", "5"], "dtype": "float16"})
    elif damage == "input shape":
        doc["inputs"][0]["type"]["shape"] = ["4", "6"]
    else:
        doc["nodes"].append({"name": "s", "op": "sum", "inputs": ["add"], "type": {"shape": ["4"], "dtype": "float32"},
                             "attrs": [["dims", "two"], ["keepdim", False]]})
        doc["outputs"] = ["s"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code, _, err = run(["fuse", bad, "-o", tmp_path / "p.json"], capsys)
    assert code == 2, err
    assert one_error_line(err) == f"error: {bad}: graph fake, {needle}"
    assert not (tmp_path / "p.json").exists()
    with pytest.raises(pipec_ir.VerifyError, match=re.escape(needle)):
        pipec_ir.loads(bad.read_text())


def test_plan_with_a_self_contradicting_graph_exits_2_in_codegen(graph_file, capsys, tmp_path):
    plan = tmp_path / "plan.json"
    code, _, err = run(["fuse", graph_file, "-o", plan], capsys)
    assert code == 0, err
    data = json.loads(plan.read_text())
    _set_node(data["document"]["graph"], "mul", type={"shape": ["4", "5"], "dtype": "int64"})
    plan.write_text(json.dumps(data))
    code, _, err = run(["codegen", plan, "-o", tmp_path / "prog.json"], capsys)
    assert code == 2, err
    assert one_error_line(err).startswith(f"error: {plan}: graph fake, node mul (mul): declared int64[4, 5], but mul(")
    assert not (tmp_path / "prog.json").exists()


def test_missing_ir_file(fake_stages, capsys, tmp_path):
    code, _, err = run(["fuse", tmp_path / "none.json", "-o", tmp_path / "x.json"], capsys)
    assert code == 2
    assert "not found" in one_error_line(err)


def test_stage_failure_in_fuse_exits_1(graph_file, capsys, tmp_path):
    code, _, err = run(["fuse", graph_file, "-o", tmp_path / "p.json", "--fusion", "crash"], capsys)
    assert code == 1
    assert one_error_line(err).startswith("error: fusion (crash) failed on graph")


# ---------------------------------------------------------------- compile / explain


def test_compile_prints_results_table(fake_stages, capsys, model_file):
    code, out, err = run(["compile", model_file, "--device", "cpu"], capsys)
    assert code == 0, err
    for row in ("graphs", "ops", "kernels", "fusions", "extern ops", "max error vs eager", "time fusion"):
        assert row in out
    assert "Triton's interpreter" in err
    assert "fusion" in err  # progress lines


def test_compile_json(fake_stages, capsys, model_file):
    code, out, err = run(["compile", model_file, "--json", "--device", "cpu"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["ok"] is True and data["interpreter"] is True
    assert (data["graph_count"], data["op_count"], data["kernel_count"], data["fusion_count"]) == (1, 3, 1, 1)
    assert data["max_error"] == 0.0
    assert data["options"]["runtime"] == "launch"


def test_compile_reduce_overhead_uses_cudagraph_runtime(fake_stages, capsys, model_file):
    code, out, err = run(["compile", model_file, "--json", "--mode", "reduce-overhead"], capsys)
    assert code == 0, err
    assert json.loads(out)["options"]["runtime"] == "cudagraph"


def test_output_code(fake_stages, capsys, model_file):
    code, out, err = run(["compile", model_file, "--output-code"], capsys)
    assert code == 0, err
    assert "# ---- fake_kernel_0" in out and "@triton.jit" in out


def test_dump_ir(fake_stages, capsys, model_file, tmp_path):
    code, _, err = run(["compile", model_file, "--dump-ir", tmp_path / "ir"], capsys)
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "ir").iterdir())
    assert names == sorted(f"tiny_0.{s}.{e}" for s in ("capture", "fusion", "codegen") for e in ("json", "txt"))


def test_numerical_mismatch_exits_1(fake_stages, capsys, model_file):
    code, out, err = run(["compile", model_file, "--runtime", "wrong"], capsys)
    assert code == 1
    assert one_error_line(err).startswith("error: tiny: output 0 differs from eager: max abs error 1")
    assert "MISMATCH" in out


def test_compile_failure_exits_1_naming_the_stage(fake_stages, capsys, model_file):
    code, _, err = run(["compile", model_file, "--fusion", "crash"], capsys)
    assert code == 1
    assert one_error_line(err) == ("error: fusion (crash) failed on graph tiny_0: "
                                   "RuntimeError: fake fusion crashed")


def test_explain(fake_stages, capsys, tmp_path):
    path = tmp_path / "brk.py"
    path.write_text("import torch\n"
                    "def model(a):\n"
                    "    x = torch.relu(a) + a\n"
                    "    torch._dynamo.graph_break()\n"
                    "    return torch.sigmoid(x)\n"
                    "example_inputs = lambda: (torch.randn(3, 4),)\n")
    code, out, err = run(["explain", path, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["graph_count"] == 2 and data["graph_break_count"] == 1 and len(data["break_reasons"]) == 1
    code, out, err = run(["explain", path], capsys)
    assert code == 0, err
    assert "graph breaks" in out


# ---------------------------------------------------------------- plugins


def test_plugins_table(fake_stages, capsys):
    code, out, err = run(["plugins"], capsys)
    assert code == 0, err
    for word in ("stage", "name", "distribution", "version", "capture", "dynamo", "fusion", "crash",
                 "codegen", "triton", "runtime", "cudagraph"):
        assert word in out


def test_plugins_json_lists_skipped(use_entry_points, example_plugin_path, capsys):
    from pipec_cli_testing import entry_point
    use_entry_points([entry_point("fake", "fake_stages"), entry_point("broken", "pipec_example_plugin.broken")])
    code, out, err = run(["plugins", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert {"stage": "codegen", "name": "triton", "distribution": "unknown", "version": "0"} in data["stages"]
    assert data["skipped"][0]["plugin"] == "broken" and data["skipped"][0]["status"] == "failed"
    warning_lines = [ln for ln in err.splitlines() if "broken" in ln]
    assert len(warning_lines) == 1 and warning_lines[0].startswith("warning: pipec: plugin 'broken'")


def test_plugins_lists_failed_registrations_and_observers(use_entry_points, capsys):
    import order_plugins
    from pipec_cli_testing import entry_point

    import pipec.plugins

    use_entry_points([entry_point("fake", "fake_stages")])
    pipec.plugins.register_plugin(order_plugins.recursing, name="recursing")
    pipec.plugins.register_plugin(order_plugins.observer, name="watcher")
    code, out, err = run(["plugins", "--json"], capsys)
    assert code == 0, err
    listed = {p["plugin"]: p for p in json.loads(out)["plugins"]}
    assert listed["watcher"]["status"] == "loaded" and listed["watcher"]["role"] == "observer"
    assert listed["watcher"]["hooks"] == ["pipec_stage_finished"]
    assert listed["recursing"]["status"] == "failed to register"
    assert "get_registry()" in listed["recursing"]["error"]
    assert listed["fake"]["role"] == "stages" and "codegen triton" in listed["fake"]["stages"]

    code, out, err = run(["plugins"], capsys)
    assert code == 0, err
    assert "watcher" in out and "observer" in out  # listed though it registers no stage
    assert "skipped plugin 'recursing' (unknown 0): failed to register: PipecPluginError:" in out


# ---------------------------------------------------------------- the installed command


@pytest.mark.skipif(shutil.which("pipec") is None, reason="pipec console script not installed")
def test_console_script_usage_error():
    proc = subprocess.run(["pipec", "compile", "definitely_missing.py"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "error: model file 'definitely_missing.py' not found"
