"""`pipec.export` / `pipec.load` and the `pipec export` / `pipec run` commands (real built-in stages)."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
from safetensors.torch import load_file, save_file

import pipec
import pipec.plugins
from pipec_runtime_cudagraph import ArtifactError, ArtifactInputError

from pipec_cli_testing import one_error_line, run


@pytest.fixture(autouse=True)
def real_stages(monkeypatch, tmp_path):
    monkeypatch.setenv("PIPEC_DISABLE_PLUGINS", "broken")  # the example plugin's broken entry point, if installed
    pipec.plugins.reset_plugins()
    registry = pipec.plugins.get_registry()
    if "export" not in registry.names("capture") or "triton" not in registry.names("codegen"):
        pytest.skip("built-in stages not installed")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # kernel sources go to a private cache
    return registry


class TwoHeads(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 6)
        self.register_buffer("shift", torch.linspace(-1, 1, 6))

    def forward(self, x):
        y = torch.nn.functional.gelu(self.fc(x)) + self.shift
        return {"probs": torch.softmax(y, -1), "rest": (y.sum(-1), y * 2)}


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: not one graph
            return x + 1
        return x - 1


MODEL_SRC = '''
import torch

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 2

torch.manual_seed(0)
model = Tiny().eval()
example_inputs = (torch.randn(3, 8),)
'''

BRANCHY_SRC = '''
import torch

class Branchy(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        if y.sum() > 0:
            return y + 1
        return y - 1

model = Branchy()
example_inputs = (torch.randn(5),)
'''


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(MODEL_SRC)
    return path


def _eager(path):
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns["model"], ns["example_inputs"]


# ---------------------------------------------------------------- Python API


def test_export_and_load_match_eager_with_structure(tmp_path):
    torch.manual_seed(0)
    model = TwoHeads().eval()
    x = torch.randn(5, 8)
    result = pipec.export(model, (x,), tmp_path / "two.pipec")
    assert result.path.is_file() and result.nbytes == result.path.stat().st_size
    assert result.inputs == [{"name": "x", "shape": [5, 8], "dtype": "float32"}]
    assert result.weights == 3 and result.kernels
    loaded = pipec.load(tmp_path / "two.pipec")
    with torch.no_grad():
        expected = model(x)
    got = loaded(x)
    assert set(got) == {"probs", "rest"} and isinstance(got["rest"], tuple)
    torch.testing.assert_close(got, expected)
    with zipfile.ZipFile(result.path) as zf:
        weights = load_file_bytes(zf.read("weights.safetensors"))
    assert set(weights) == {"fc.weight", "fc.bias", "shift"}
    torch.testing.assert_close(weights["shift"], model.shift)


def load_file_bytes(data: bytes) -> dict:
    from safetensors.torch import load

    return load(data)


def test_reexport_is_byte_identical(tmp_path):
    torch.manual_seed(0)
    model = TwoHeads().eval()
    x = torch.randn(5, 8)
    a = pipec.export(model, (x,), tmp_path / "a.pipec")
    b = pipec.export(model, (x,), tmp_path / "b.pipec")
    assert a.sha256 == b.sha256
    assert (tmp_path / "a.pipec").read_bytes() == (tmp_path / "b.pipec").read_bytes()


def test_dynamic_shapes_and_guards(tmp_path):
    torch.manual_seed(0)
    model = TwoHeads().eval()
    batch = torch.export.Dim("batch", min=2, max=64)
    result = pipec.export(model, (torch.randn(5, 8),), tmp_path / "dyn.pipec", dynamic_shapes=({0: batch},),
                          check=True)
    assert result.inputs[0]["shape"] == ["s0", 8]
    assert result.symbols == [{"name": "s0", "min": 2, "max": 64, "hint": 5}]
    assert result.max_error is not None and result.mismatch is None
    loaded = pipec.load(tmp_path / "dyn.pipec")
    for n in (2, 17, 64):
        x = torch.randn(n, 8)
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), model(x))
    with pytest.raises(ArtifactInputError, match=r"s0 must be in \[2, 64\]"):
        loaded(torch.randn(65, 8))
    with pytest.raises(ArtifactInputError, match=r"has shape \(4, 7\), expected \(s0, 8\)"):
        loaded(torch.randn(4, 7))
    with pytest.raises(ArtifactInputError, match="dtype float16, expected float32"):
        loaded(torch.randn(4, 8, dtype=torch.float16))


def test_dynamic_true_makes_every_dimension_it_can_symbolic(tmp_path):
    def f(a, b):
        return torch.relu(a) * b + a

    result = pipec.export(f, (torch.randn(4, 5), torch.randn(4, 5)), tmp_path / "f.pipec", dynamic=True)
    assert result.inputs[0]["shape"] == ["s0", "s1"]
    loaded = pipec.load(tmp_path / "f.pipec")
    a, b = torch.randn(3, 9), torch.randn(3, 9)
    torch.testing.assert_close(loaded(a, b), f(a, b))


def test_graph_break_is_an_error_naming_the_line(tmp_path):
    with pytest.raises(pipec.PipecError) as info:
        pipec.export(Branchy(), (torch.randn(4),), tmp_path / "b.pipec")
    message = str(info.value)
    assert len(message.splitlines()) == 1
    assert "test_pipec_artifact.py:" in message and "if x.sum() > 0" in message, message
    assert not (tmp_path / "b.pipec").exists()


def test_bad_keywords_raise_value_error(tmp_path):
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="capture 'dynamo' cannot export"):
        pipec.export(TwoHeads(), (x,), tmp_path / "m.pipec", capture="dynamo")
    with pytest.raises(ValueError, match="unknown fusion 'nope'"):
        pipec.export(TwoHeads(), (x,), tmp_path / "m.pipec", fusion="nope")


def test_model_class_outside_sys_modules_is_explained(tmp_path):
    cls = type("Hidden", (torch.nn.Module,), {"forward": lambda self, x: x + 1, "__module__": "not_a_module"})
    with pytest.raises(pipec.PipecError, match="not in sys.modules.*strict=False"):
        pipec.export(cls(), (torch.randn(2),), tmp_path / "h.pipec")
    result = pipec.export(cls(), (torch.randn(2),), tmp_path / "h.pipec", strict=False)
    torch.testing.assert_close(pipec.load(result.path)(torch.ones(2)), torch.full((2,), 2.0))


def test_fusion_policy_changes_the_artifact(tmp_path):
    torch.manual_seed(0)
    model, x = TwoHeads().eval(), torch.randn(5, 8)
    fused = pipec.export(model, (x,), tmp_path / "fused.pipec")
    unfused = pipec.export(model, (x,), tmp_path / "unfused.pipec", fusion="none")
    assert len(unfused.kernels) > len(fused.kernels)
    manifest = json.loads(zipfile.ZipFile(unfused.path).read("manifest.json"))
    assert manifest["stages"]["fusion"]["name"] == "none"
    torch.testing.assert_close(pipec.load(unfused.path)(x), pipec.load(fused.path)(x))


def test_load_refuses_a_tampered_file(tmp_path):
    result = pipec.export(TwoHeads().eval(), (torch.randn(2, 8),), tmp_path / "m.pipec")
    data = bytearray(result.path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "bad.pipec").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="modified or damaged"):
        pipec.load(tmp_path / "bad.pipec")


# ---------------------------------------------------------------- the commands


def test_cli_export_and_run_random(model_file, tmp_path, capsys):
    out_path = tmp_path / "tiny.pipec"
    code, out, err = run(["export", model_file, "-o", out_path, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["path"] == str(out_path) and data["inputs"][0]["shape"] == [3, 8]
    code, out, err = run(["run", out_path, "--random", "--json"], capsys)
    assert code == 0, err
    ran = json.loads(out)
    assert ran["outputs"][0]["shape"] == [3, 4] and ran["outputs"][0]["dtype"] == "float32"
    assert ran["sha256"] == data["sha256"]
    code, again, _ = run(["run", out_path, "--random", "--json"], capsys)
    assert json.loads(again)["outputs"] == ran["outputs"]  # fixed seed: same inputs, same checksum
    code, table, err = run(["run", out_path, "--random"], capsys)
    assert code == 0 and "[3, 4]" in table and "float32" in table


def test_cli_export_table_and_check(model_file, tmp_path, capsys):
    code, out, err = run(["export", model_file, "-o", tmp_path / "t.pipec", "--check", "--device", "cpu"], capsys)
    assert code == 0, err
    assert "sha256" in out and "max error vs eager" in out and "MISMATCH" not in out


def test_cli_run_with_inputs_file(model_file, tmp_path, capsys):
    model, (x,) = _eager(model_file)
    art = tmp_path / "tiny.pipec"
    assert run(["export", model_file, "-o", art], capsys)[0] == 0
    for key in ("x", "0"):
        inputs = tmp_path / f"in_{key}.safetensors"
        save_file({key: x}, str(inputs))
        outputs = tmp_path / f"out_{key}.safetensors"
        code, out, err = run(["run", art, "--inputs", inputs, "--save-outputs", outputs, "--json"], capsys)
        assert code == 0, err
        with torch.no_grad():
            torch.testing.assert_close(load_file(str(outputs))["0"], model(x))
        assert json.loads(out)["outputs"][0]["sum"] == pytest.approx(float(model(x).sum()), rel=1e-5)


def test_cli_dynamic_export_runs_other_sizes(model_file, tmp_path, capsys):
    model, _ = _eager(model_file)
    art = tmp_path / "dyn.pipec"
    code, out, err = run(["export", model_file, "-o", art, "--dynamic", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["inputs"][0]["shape"] == ["s0", 8]
    x = torch.randn(11, 8)
    save_file({"x": x}, str(tmp_path / "in.safetensors"))
    code, out, err = run(["run", art, "--inputs", tmp_path / "in.safetensors", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["outputs"][0]["shape"] == [11, 4]


@pytest.mark.parametrize("args, needle", [
    (["--inputs", "{bad_shape}"], "input 0 (x) has shape (3, 7), expected (3, 8)"),
    (["--inputs", "{bad_dtype}"], "input 0 (x) has dtype float64, expected float32"),
    (["--inputs", "{bad_key}"], "has no tensor 'x'"),
    (["--inputs", "{missing}"], "not found"),
    ([], "give either --inputs"),
    (["--random", "--inputs", "{bad_key}"], "give either --inputs"),
    (["--random", "--sha256", "0" * 64], "sha256"),
    (["--random", "--runtime", "nope"], "nope"),
])
def test_cli_run_usage_errors_exit_2(model_file, tmp_path, capsys, args, needle):
    art = tmp_path / "tiny.pipec"
    assert run(["export", model_file, "-o", art], capsys)[0] == 0
    files = {"bad_shape": {"x": torch.randn(3, 7)}, "bad_dtype": {"x": torch.randn(3, 8, dtype=torch.float64)},
             "bad_key": {"y": torch.randn(3, 8)}}
    paths = {"missing": tmp_path / "missing.safetensors"}
    for key, tensors in files.items():
        paths[key] = tmp_path / f"{key}.safetensors"
        save_file(tensors, str(paths[key]))
    argv = ["run", art] + [a.format(**paths) for a in args]
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert needle in one_error_line(err)


def test_cli_run_refuses_tampered_artifact(model_file, tmp_path, capsys):
    art = tmp_path / "tiny.pipec"
    assert run(["export", model_file, "-o", art], capsys)[0] == 0
    data = bytearray(art.read_bytes())
    data[-200] ^= 0x01
    art.write_bytes(bytes(data))
    code, out, err = run(["run", art, "--random"], capsys)
    assert code == 2
    assert "modified or damaged" in one_error_line(err) and not out
    code, _, err = run(["run", tmp_path / "nothing.pipec", "--random"], capsys)
    assert code == 2 and "no such file" in one_error_line(err)


def test_cli_export_graph_break_exits_1_naming_the_line(tmp_path, capsys):
    path = tmp_path / "branchy.py"
    path.write_text(BRANCHY_SRC)
    code, out, err = run(["export", path, "-o", tmp_path / "b.pipec"], capsys)
    assert code == 1
    line = one_error_line(err)
    assert f"{path}:7" in line and "if y.sum() > 0" in line, line


@pytest.mark.parametrize("args, needle", [
    (["{missing}", "-o", "{out}"], "not found"),
    (["{model}", "-o", "{out}", "--fusion", "nope"], "nope"),
    (["{model}", "-o", "{out}", "--model", "nothing"], "nothing"),
    (["{model}"], "-o"),
])
def test_cli_export_usage_errors_exit_2(model_file, tmp_path, capsys, args, needle):
    paths = {"missing": tmp_path / "missing.py", "out": tmp_path / "o.pipec", "model": model_file}
    code, _, err = run(["export"] + [a.format(**paths) for a in args], capsys)
    assert code == 2, err
    assert needle in one_error_line(err)
    assert not (tmp_path / "o.pipec").exists()
