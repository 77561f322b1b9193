"""Artifact files (`pipec_runtime_cudagraph.bundle`, `bundle_loader`): packing, checking, tampering, guards.

Hand-written documents only (this package's tests import no other stage): out = x + w,
with w a weight, static (n=100) or with a symbolic size s0.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

from pipec_ir import (Buffer, Graph, GraphInput, Kernel, KernelPlan, Node, Program, Step, SymbolRange)
from pipec_ir.symbolic import size_symbol
from runtime_helpers import T, add_kernel

from pipec_runtime_cudagraph import bundle as art
from pipec_runtime_cudagraph.bundle import (ArtifactError, ArtifactInputError, TamperedArtifactError, pack_artifact,
                                            read_artifact, write_artifact)
from pipec_runtime_cudagraph.bundle_loader import load_artifact


def documents(n=100, weight=True):
    """(graph, plan, program) for out = x + y; y is a parameter when `weight`."""
    t = T([n])
    graph = Graph(name="addw", inputs=(GraphInput("x", t), GraphInput("y", t, "parameter" if weight else "input")),
                  nodes=(Node("out", "add", ("x", "y"), t),), outputs=("out",),
                  symbols=(SymbolRange("s0", 2, 4096, 64),) if not isinstance(n, int) else ())
    plan = KernelPlan(graph=graph, policy="none",
                      kernels=(Kernel("k0", "pointwise", ("out",), ("out",), ("x", "y"), domain=tuple(t.shape)),))
    program = Program(name="addw", inputs=(Buffer("x", t), Buffer("y", t)), outputs=("out",),
                      buffers=(Buffer("out", t),), kernels=(add_kernel("pipec_add_0", n),),
                      steps=(Step("launch", "pipec_add_0", ("x", "y"), ("out",)),),
                      symbols=graph.symbols)
    return graph, plan, program


W = torch.arange(100, dtype=torch.float32) / 7


def packed(**kwargs) -> bytes:
    graph, plan, program = documents()
    return pack_artifact(graph=graph, plan=plan, program=program, weights={"y": W}, **kwargs)


@pytest.fixture(scope="module")
def data() -> bytes:
    return packed()


@pytest.fixture()
def kernel_dir(tmp_path):
    return str(tmp_path / "kernels")


def members(blob: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def rezip(contents: dict[str, bytes]) -> bytes:
    """An archive of these members, laid out as pipec writes them (only the contents differ)."""
    return art._zip_bytes(list(contents.items()))


# ---------------------------------------------------------------- the file


def test_layout_and_manifest(data):
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        assert zf.testzip() is None
    names = [i.filename for i in infos]
    assert names == ["manifest.json", "manifest.sha256", "graph.json", "kernel_plan.json", "program.json",
                     "kernels/pipec_add_0.py", "weights.safetensors"]
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
    files = members(data)
    manifest = json.loads(files["manifest.json"])
    assert manifest["format"] == "pipec-artifact" and manifest["format_version"] == [1, 1]
    assert manifest["inputs"] == [{"name": "x", "shape": [100], "dtype": "float32"}]
    assert manifest["weights"] == [{"name": "y", "shape": [100], "dtype": "float32", "role": "parameter"}]
    assert manifest["outputs"] == [{"index": 0, "name": "out", "shape": [100], "dtype": "float32"}]
    for dist in ("pipec-ir", "pipec-runtime-cudagraph", "torch", "triton", "safetensors", "python"):
        assert manifest["made_with"][dist]
    for m in manifest["members"]:
        assert hashlib.sha256(files[m["name"]]).hexdigest() == m["sha256"]
        assert len(files[m["name"]]) == m["size"]
    assert files["manifest.sha256"].decode().strip() == hashlib.sha256(files["manifest.json"]).hexdigest()
    assert files["kernels/pipec_add_0.py"].decode() == documents()[2].kernels[0].source
    assert b"pickle" not in files["weights.safetensors"][:200]


def test_same_inputs_same_bytes(data):
    assert packed() == data
    other = torch.arange(100, dtype=torch.float32)
    graph, plan, program = documents()
    assert pack_artifact(graph=graph, plan=plan, program=program, weights={"y": other}) != data


def test_write_is_atomic_and_readable(tmp_path, data, kernel_dir):
    path = write_artifact(tmp_path / "sub" / "m.pipec", data)
    assert path.read_bytes() == data
    assert [p.name for p in path.parent.iterdir()] == ["m.pipec"]  # no temporary file left
    model = load_artifact(path, kernel_dir=kernel_dir)
    x = torch.randn(100)
    torch.testing.assert_close(model(x), x + W)
    assert model.sha256 == hashlib.sha256(data).hexdigest()


def test_load_and_run_with_weights_bound(data, kernel_dir):
    model = load_artifact(data, kernel_dir=kernel_dir)
    assert [s.name for s in model.inputs] == ["x"]
    x = torch.randn(100)
    torch.testing.assert_close(model(x), x + W)
    assert len(model.run([x])) == 1
    (rx,) = model.random_inputs(seed=3)
    torch.testing.assert_close(rx, model.random_inputs(seed=3)[0])


def test_output_structure(kernel_dir):
    blob = packed(output_structure={"dict": [["sum", {"tuple": [0]}]]})
    model = load_artifact(blob, kernel_dir=kernel_dir)
    x = torch.randn(100)
    out = model(x)
    assert set(out) == {"sum"} and isinstance(out["sum"], tuple)
    torch.testing.assert_close(out["sum"][0], x + W)
    with pytest.raises(ArtifactError, match="output structure"):
        packed(output_structure={"tuple": [0, 1]})


def test_no_pickle_and_no_torch_load(monkeypatch, data, kernel_dir):
    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    model = load_artifact(data, kernel_dir=kernel_dir)
    x = torch.randn(100)
    torch.testing.assert_close(model(x), x + W)


# ---------------------------------------------------------------- refusing bad files


def test_each_member_changed_is_refused(data):
    for name, content in members(data).items():
        changed = dict(members(data))
        changed[name] = content[:-1] + bytes([content[-1] ^ 0x20])
        with pytest.raises(TamperedArtifactError, match="modified or damaged") as info:
            read_artifact(rezip(changed))
        assert len(str(info.value).splitlines()) == 1
        assert name.split("/")[-1].split(".")[0] in str(info.value) or "manifest" in str(info.value)


def test_member_added_removed_or_reordered_is_refused(data):
    files = members(data)
    with pytest.raises(TamperedArtifactError, match="extra.py is not listed"):
        read_artifact(rezip({**files, "kernels/extra.py": b"print('hi')\n"}))
    for name in files:
        fewer = {k: v for k, v in files.items() if k != name}
        with pytest.raises(ArtifactError):
            read_artifact(rezip(fewer))
    swapped = dict(reversed(list(files.items())))
    with pytest.raises(TamperedArtifactError, match="order"):
        read_artifact(rezip(swapped))


def test_manifest_edited_is_refused(data):
    files = members(data)
    manifest = json.loads(files["manifest.json"])
    manifest["symbols"] = [{"name": "s0", "min": 1, "max": None, "hint": 4}]
    text = (json.dumps(manifest, sort_keys=True, indent=2) + "\n").encode()
    with pytest.raises(TamperedArtifactError, match="manifest.json does not match manifest.sha256"):
        read_artifact(rezip({**files, "manifest.json": text}))
    # a consistent forgery of the digests is caught by the cross-checks with program.json
    digest = (hashlib.sha256(text).hexdigest() + "\n").encode()
    with pytest.raises(ArtifactError, match="do not match program.json"):
        read_artifact(rezip({**files, "manifest.json": text, "manifest.sha256": digest}))


def test_any_byte_flipped_is_refused(data):
    size = len(data)
    stride = 1 if size < 20000 else max(size // 4000, 1)  # every byte of a small artifact
    for i in list(range(0, size, stride)) + list(range(size - 120, size)):
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises(ArtifactError):
            read_artifact(bytes(bad))


def test_trailing_or_leading_bytes_are_refused(data):
    for bad in (data + b"\0", b"\0" + data, data[:-1]):
        with pytest.raises(ArtifactError):
            read_artifact(bad)


def test_pinned_sha256(tmp_path, data):
    path = write_artifact(tmp_path / "m.pipec", data)
    read_artifact(path, sha256=hashlib.sha256(data).hexdigest())
    with pytest.raises(TamperedArtifactError, match="sha256"):
        read_artifact(path, sha256="0" * 64)


def test_not_an_artifact(tmp_path):
    with pytest.raises(ArtifactError, match="no such file"):
        read_artifact(tmp_path / "missing.pipec")
    (tmp_path / "x.pipec").write_text("hello")
    with pytest.raises(ArtifactError, match="not a pipec artifact"):
        read_artifact(tmp_path / "x.pipec")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("readme.txt", "hi")
    with pytest.raises(ArtifactError, match="not a pipec artifact"):
        read_artifact(buffer.getvalue())


def test_newer_major_format_is_refused(data):
    files = members(data)
    manifest = json.loads(files["manifest.json"])
    manifest["format_version"] = [2, 0]
    text = (json.dumps(manifest, sort_keys=True, indent=2) + "\n").encode()
    digest = (hashlib.sha256(text).hexdigest() + "\n").encode()
    with pytest.raises(ArtifactError, match="format 2.0 is not supported"):
        read_artifact(rezip({**files, "manifest.json": text, "manifest.sha256": digest}))


def test_bad_weights_are_refused_when_packing():
    graph, plan, program = documents()
    with pytest.raises(ArtifactError, match="no weight"):
        pack_artifact(graph=graph, plan=plan, program=program, weights={})
    with pytest.raises(ArtifactError, match="expects float32"):
        pack_artifact(graph=graph, plan=plan, program=program, weights={"y": W.double()})
    with pytest.raises(ArtifactError, match="not graph inputs"):
        pack_artifact(graph=graph, plan=plan, program=program, weights={"y": W, "z": W})


def test_tied_weights_are_stored(kernel_dir):
    t = T([100])
    graph = Graph(name="tied", inputs=(GraphInput("x", t), GraphInput("a", t, "parameter"),
                                       GraphInput("b", t, "parameter")),
                  nodes=(Node("out", "add", ("a", "b"), t),), outputs=("out",))
    plan = KernelPlan(graph=graph, policy="none",
                      kernels=(Kernel("k0", "pointwise", ("out",), ("out",), ("a", "b"), domain=(100,)),))
    program = Program(name="tied", inputs=(Buffer("x", t), Buffer("a", t), Buffer("b", t)), outputs=("out",),
                      buffers=(Buffer("out", t),), kernels=(add_kernel("pipec_add_0", 100),),
                      steps=(Step("launch", "pipec_add_0", ("a", "b"), ("out",)),))
    blob = pack_artifact(graph=graph, plan=plan, program=program, weights={"a": W, "b": W})
    torch.testing.assert_close(load_artifact(blob, kernel_dir=kernel_dir)(torch.randn(100)), 2 * W)


def test_zip64_records(monkeypatch, kernel_dir):
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 64)  # every size and offset past 64 bytes takes zip64 records
    blob = packed()
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        assert zf.testzip() is None
        assert any(info.extra for info in zf.infolist())  # zip64 extra fields
        assert zf.read("weights.safetensors") == members(packed())["weights.safetensors"]
    x = torch.randn(100)
    torch.testing.assert_close(load_artifact(blob, kernel_dir=kernel_dir)(x), x + W)
    bad = bytearray(blob)
    bad[-30] ^= 1
    with pytest.raises(ArtifactError):
        read_artifact(bytes(bad))


# Files written by pipec before its archives were framed by zipfile (format 1.0, pipec's own zip
# writer): data/addw_format_1_0.pipec as `packed()` made it, and data/addw_format_1_0_zip64.pipec
# with that writer's zip64 threshold lowered to 64 bytes (its layout past 4 GiB, small).
DATA = os.path.join(os.path.dirname(__file__), "data")


def test_format_1_0_files_are_read_and_framed_as_zipfile_frames_them(kernel_dir):
    with open(os.path.join(DATA, "addw_format_1_0.pipec"), "rb") as f:
        old = f.read()
    artifact = read_artifact(old)
    assert artifact.manifest["format_version"] == [1, 0]
    assert art._zip_bytes(list(members(old).items())) == old  # the same bytes, member for member
    x = torch.randn(100)
    torch.testing.assert_close(load_artifact(old, kernel_dir=kernel_dir)(x), x + W)


def test_a_format_1_0_file_past_the_zip64_limit_is_checked_member_by_member(monkeypatch, kernel_dir):
    """Past 2 GiB zipfile frames an archive otherwise than pipec's 1.0 writer did (zip64 records
    from 2 GiB on, not 4 GiB): such a 1.0 file is checked member by member (sizes, sha256, CRCs,
    nothing between or after) instead of byte for byte: a changed member or a byte added at the
    end is refused, a changed field of the zip directory is not. Here the limit is 64 bytes."""
    with open(os.path.join(DATA, "addw_format_1_0_zip64.pipec"), "rb") as f:
        old = f.read()
    with pytest.raises(TamperedArtifactError, match="zip headers"):
        read_artifact(old)  # a small file: byte for byte, and zipfile frames it otherwise
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 64)
    assert art._zip_bytes(list(members(old).items())) != old
    x = torch.randn(100)
    torch.testing.assert_close(load_artifact(old, kernel_dir=kernel_dir)(x), x + W)
    weights = old.rindex(b"weights.safetensors", 0, old.index(b"PK\x01\x02"))  # its local header's name
    for position in (weights + 200, len(old) - 1):  # a weight byte; the end record's comment length
        bad = bytearray(old)
        bad[position] ^= 1
        with pytest.raises(ArtifactError):
            read_artifact(bytes(bad))
    with pytest.raises(ArtifactError):
        read_artifact(old + b"\0")


# ---------------------------------------------------------------- guards


@pytest.fixture(scope="module")
def dynamic_data() -> bytes:
    s0 = size_symbol("s0")
    graph, plan, program = documents(n=s0, weight=False)
    return pack_artifact(graph=graph, plan=plan, program=program, weights={})


def test_symbolic_sizes_run_inside_their_range(dynamic_data, kernel_dir):
    model = load_artifact(dynamic_data, kernel_dir=kernel_dir)
    assert json.loads(members(dynamic_data)["manifest.json"])["symbols"] == [
        {"name": "s0", "min": 2, "max": 4096, "hint": 64}]
    for n in (2, 17, 1000):
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(model(x, y), x + y)
    x, y = model.random_inputs()
    assert x.shape == (64,)


@pytest.mark.parametrize("inputs, message", [
    (lambda: (torch.randn(1), torch.randn(1)), r"input 0 \(x\) has size 1 in dimension 0, but s0 must be in \[2, 4096\]"),
    (lambda: (torch.randn(5000), torch.randn(5000)), r"s0 must be in \[2, 4096\]"),
    (lambda: (torch.randn(8), torch.randn(9)), r"input 1 \(y\) has shape \(9,\), expected \(s0\) = \(8,\) with s0=8"),
    (lambda: (torch.randn(8), torch.randn(8, dtype=torch.float64)), r"input 1 \(y\) has dtype float64, expected float32"),
    (lambda: (torch.randn(8),), r"expects 2 inputs \(x, y\), got 1"),
    (lambda: (torch.randn(8), torch.randn(8, 1)), r"input 1 \(y\) has shape \(8, 1\) \(2 dims\)"),
    (lambda: (torch.randn(8), [1.0] * 8), r"input 1 \(y\) is not a tensor \(got list\)"),
])
def test_inputs_outside_the_guards_are_refused(dynamic_data, kernel_dir, inputs, message):
    model = load_artifact(dynamic_data, kernel_dir=kernel_dir)
    with pytest.raises(ArtifactInputError, match=message) as info:
        model(*inputs())
    assert len(str(info.value).splitlines()) == 1
    assert str(info.value).startswith("addw: ")


def test_static_shape_guard(data, kernel_dir):
    model = load_artifact(data, kernel_dir=kernel_dir)
    with pytest.raises(ArtifactInputError, match=r"input 0 \(x\) has shape \(99,\), expected \(100,\)"):
        model(torch.randn(99))


def test_unknown_runtime_is_refused(data):
    with pytest.raises(ArtifactError, match="runtime 'nope'"):
        load_artifact(data, "nope")
    with pytest.raises(ArtifactError, match="runtime"):
        packed(runtime="nope")


# ---------------------------------------------------------------- only the runtime package


def test_loading_imports_no_other_stage_and_no_dynamo(tmp_path, data):
    path = write_artifact(tmp_path / "m.pipec", data)
    script = textwrap.dedent(f"""
        import sys
        from pipec_runtime_cudagraph import load_artifact
        model = load_artifact({str(path)!r}, kernel_dir={str(tmp_path / "k")!r})
        import torch
        x = torch.randn(100)
        torch.testing.assert_close(model(x), x + torch.arange(100, dtype=torch.float32) / 7)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in
                        ("pipec", "pipec_capture", "pipec_fusion", "pipec_codegen_triton")
                        or m == "torch._dynamo" or m.startswith("torch._dynamo."))
        print("LOADED", loaded)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout, proc.stdout


def test_symbol_ranges_are_recorded_from_the_program():
    s0 = size_symbol("s0")
    graph, plan, program = documents(n=s0, weight=False)
    described = art.describe(graph, program)
    assert described["inputs"][0]["shape"] == ["s0"]
    assert described["symbols"] == [{"name": "s0", "min": 2, "max": 4096, "hint": 64}]


def test_plan_of_a_rewritten_graph_is_accepted_a_foreign_one_refused():
    """Fusion may rewrite the graph it plans (recomputing a value in its reader): a plan whose
    graph has graph.json's inputs and output types packs (tiny OPT and Swin failed to export);
    a plan of another graph is still refused."""
    import dataclasses

    graph, plan, program = documents()
    t = graph.nodes[0].type
    rewritten = dataclasses.replace(graph, nodes=(Node("y2", "mul", ("y", "y"), t), Node("out", "add", ("x", "y"), t)))
    pack_artifact(graph=graph, plan=dataclasses.replace(plan, graph=rewritten), program=program, weights={"y": W})
    other = dataclasses.replace(graph, inputs=(GraphInput("x", t), GraphInput("y", t, "input")))
    with pytest.raises(ArtifactError, match="not a plan of graph.json"):
        pack_artifact(graph=graph, plan=dataclasses.replace(plan, graph=other), program=program, weights={"y": W})
