"""Exported artifacts end to end: every example through `pipec.export`, run from the file alone."""

import importlib.metadata
import importlib.util
import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

import pipec
from pipec_runtime_cudagraph import ArtifactError, ArtifactInputError, TamperedArtifactError

from conftest import EXAMPLES, ROOT

FORBIDDEN = ("pipec_capture", "pipec_fusion", "pipec_codegen_triton", "torch._dynamo")


def load_example_module(path):
    """The example as an importable module (strict torch.export looks the model's class up by module)."""
    name = f"pipec_e2e_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    module = sys.modules[name]
    inputs = module.example_inputs() if callable(module.example_inputs) else module.example_inputs
    return module.model, tuple(inputs)


def _env():
    env = dict(os.environ)
    env["PIPEC_DISABLE_PLUGINS"] = "broken"
    return env


def pipec_cli(*args):
    return subprocess.run([sys.executable, "-m", "pipec", *map(str, args)], capture_output=True, text=True, env=_env())


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{example stem: (path, ExportResult)}: each example exported once for the module."""
    out = tmp_path_factory.mktemp("artifacts")
    results = {}
    for path in EXAMPLES:
        model, inputs = load_example_module(path)
        results[path.stem] = (out / f"{path.stem}.pipec", pipec.export(model, inputs, out / f"{path.stem}.pipec",
                                                                       name=path.stem))
    return results


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_artifact_matches_eager(exported, path):
    model, inputs = load_example_module(path)
    artifact, result = exported[path.stem]
    loaded = pipec.load(artifact)
    with torch.no_grad():
        expected = model(*inputs)
        got = loaded(*inputs)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
    assert [s.name for s in loaded.inputs] == [i["name"] for i in result.inputs]
    made_with = loaded.manifest["made_with"]
    assert made_with["torch"] == importlib.metadata.version("torch") and made_with["pipec"] == pipec.__version__


def _kernels(rows):
    """What each kernel computes and how it runs, names aside (the graphs' names differ)."""
    return [(r["kind"], tuple(r["ops"]), r["runs_as"]) for r in rows]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_artifact_has_the_kernels_of_compile(exported, path):
    """torch.export keeps `aten.linear` (and every composite op) unless told otherwise: the artifact
    must decompose it as Dynamo does, so that bias and GELU fuse into the matmul's epilogue."""
    model, inputs = load_example_module(path)
    _, result = exported[path.stem]
    report = pipec.explain(model, *inputs)
    assert report.graph_count == 1 and len(result.session.graphs) == 1
    ours, theirs = result.session.graphs[0], report.graphs[0]
    assert (ours.kernel_count, ours.fusion_count) == (theirs["kernel_count"], theirs["fusion_count"])
    assert _kernels(ours.kernel_rows) == _kernels(theirs["kernels"])
    assert ours.op_count == theirs["op_count"]
    if path.stem in ("gpt2_block", "mlp_gelu"):
        assert any(ops[:3] == ("mm", "add", "gelu") for _, ops, _ in _kernels(ours.kernel_rows))
        assert not any(t.startswith("aten.linear") for t, _ in ours.extern_ops)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_reexport_gives_identical_bytes(exported, path, tmp_path):
    model, inputs = load_example_module(path)
    again = pipec.export(model, inputs, tmp_path / "again.pipec", name=path.stem)
    artifact, first = exported[path.stem]
    assert again.sha256 == first.sha256
    assert (tmp_path / "again.pipec").read_bytes() == artifact.read_bytes()


def test_cli_export_in_another_process_gives_the_same_bytes(exported, tmp_path):
    artifact, _ = exported["mlp_gelu"]
    r = pipec_cli("export", ROOT / "examples" / "mlp_gelu.py", "-o", tmp_path / "cli.pipec")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "cli.pipec").read_bytes() == artifact.read_bytes()


def test_every_member_of_a_real_artifact_is_guarded(exported):
    artifact, _ = exported["gpt2_block"]
    data = artifact.read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
    assert [i.filename for i in infos][:5] == ["manifest.json", "manifest.sha256", "graph.json",
                                              "kernel_plan.json", "program.json"]
    assert infos[-1].filename == "weights.safetensors"
    assert any(i.filename.startswith("kernels/") for i in infos)
    for info in infos:
        for where in (0, info.file_size // 2, info.file_size - 1):
            bad = bytearray(data)
            bad[info.header_offset + 30 + len(info.filename) + where] ^= 0x04
            with pytest.raises(TamperedArtifactError):
                pipec.load(bytes(bad))


def test_wrong_inputs_are_refused_with_one_line(exported):
    loaded = pipec.load(exported["gpt2_block"][0])
    for bad, needle in (((torch.randn(2, 16, 32),), "has shape (2, 16, 32), expected (2, 16, 64)"),
                        ((torch.randn(2, 16, 64, dtype=torch.bfloat16),), "dtype bfloat16, expected float32"),
                        ((), "expects 1 input (x), got 0")):
        with pytest.raises(ArtifactInputError) as info:
            loaded(*bad)
        assert needle in str(info.value) and len(str(info.value).splitlines()) == 1


def test_run_command_on_an_example(exported, tmp_path):
    artifact, result = exported["norm_softmax"]
    r = pipec_cli("run", artifact, "--random", "--json", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["outputs"][0]["shape"] == [4, 16, 64] and data["outputs"][0]["dtype"] == "float32"
    assert data["outputs"][0]["sum"] == pytest.approx(64.0, rel=1e-4)  # softmax rows sum to one
    assert data["sha256"] == result.sha256
    bad = bytearray(artifact.read_bytes())
    bad[100] ^= 1
    (tmp_path / "bad.pipec").write_bytes(bytes(bad))
    r = pipec_cli("run", tmp_path / "bad.pipec", "--random")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")] and not r.stdout


@pytest.mark.parametrize("how", ["runtime", "pipec.load", "pipec run"])
def test_loading_and_running_needs_only_the_runtime(exported, tmp_path, how):
    """No capture, fusion or codegen stage, and no Dynamo, in a process that loads and runs an artifact.

    torch itself imports torch.export and torch.fx at `import torch`, so those cannot be
    asserted away; torch._dynamo is imported only on demand (torch.compile, torch.export.export).
    """
    artifact, _ = exported["gpt2_block"]  # library calls (linear, attention) run through torch
    if how == "runtime":
        body = f"""
            from pipec_runtime_cudagraph import load_artifact
            model = load_artifact({str(artifact)!r})
            model(*model.random_inputs())
        """
    elif how == "pipec.load":
        body = f"""
            import pipec
            model = pipec.load({str(artifact)!r})
            model(*model.random_inputs())
        """
    else:
        body = f"""
            from pipec.cli import main
            try:
                main(["run", {str(artifact)!r}, "--random", "--json"])
            except SystemExit as exc:
                assert exc.code == 0, exc.code
        """
    script = textwrap.dedent(body) + textwrap.dedent(f"""
        import sys
        print("FORBIDDEN", sorted(m for m in sys.modules if m in {FORBIDDEN!r} or m.startswith("torch._dynamo.")))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "FORBIDDEN []" in proc.stdout, proc.stdout


def test_graph_break_in_an_example_style_file_fails_the_export(tmp_path):
    src = tmp_path / "breaks.py"
    src.write_text(textwrap.dedent("""
        import torch

        def model(x):
            y = torch.relu(x)
            return y * float(y.sum().item() > 0)

        example_inputs = (torch.randn(4, 4),)
    """))
    r = pipec_cli("export", src, "-o", tmp_path / "b.pipec")
    assert r.returncode == 1, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"{src}:6" in errors[0], r.stderr
    assert not (tmp_path / "b.pipec").exists()


def test_not_an_artifact_is_refused(tmp_path):
    (tmp_path / "x.pipec").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ArtifactError, match="not a pipec artifact"):
        pipec.load(tmp_path / "x.pipec")


class SelfAttention(torch.nn.Module):
    """A ViT-style attention block: heads split off a projection, attended, merged back with
    `.transpose(1, 2).contiguous()` (`merge="contiguous"`) or a plain reshape, projected out."""

    def __init__(self, merge: str, dim: int = 8, heads: int = 2):
        super().__init__()
        self.merge, self.heads = merge, heads
        self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2)
        if self.merge == "contiguous":
            y = y.contiguous()
        return self.out(y.reshape(b, s, d))


@pytest.mark.parametrize("merge", ["contiguous", "reshape"])
def test_artifact_copies_attention_output_only_where_needed(merge, tmp_path):
    """Exported with the math kernel, whose output layout makes the merge a copy in the trace, and
    run with whichever kernel torch picks: the copy is a library call that copies only where the
    layout needs it (capture's portable_attention.py), and the values are eager's either way."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    model, inputs = SelfAttention(merge).eval(), (torch.randn(2, 5, 8),)
    with sdpa_kernel([SDPBackend.MATH]):
        pipec.export(model, inputs, tmp_path / "attention.pipec")
    loaded = pipec.load(tmp_path / "attention.pipec")
    with zipfile.ZipFile(tmp_path / "attention.pipec") as zf:
        steps = json.loads(zf.read("program.json"))
    assert "aten.contiguous.default" in json.dumps(steps)
    with torch.no_grad():
        expected = model(*inputs)
        for backends in ([SDPBackend.MATH], [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
            with sdpa_kernel(backends):
                torch.testing.assert_close(loaded(*inputs), expected)
