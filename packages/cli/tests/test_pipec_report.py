"""`pipec report MODEL.py -o report.html`: one offline page. Checked as markup (well-formed, no
URL, a fusion picture per graph whose clusters are the graph's kernels, the rejected fusion
marked with its reason, breaks with their source line, kernel sources, launch configs, the
profile, the error against eager) and, where a Chromium is installed (CI installs Debian's),
rendered by headless Chromium: no console error, and a picture that is not blank."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib

import pytest

from pipec import report_svg
from pipec_cli_testing import one_error_line, run

MODEL = '''
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.fc(self.norm(x)))
        print("a graph break")
        return (y.sum(-1, keepdim=True) + x).softmax(-1)


model = Block().eval()
example_inputs = (torch.randn(2, 8),)
'''


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """(path, text) of the report of MODEL, made once by the `pipec report` command."""
    from pipec.cli import main

    where = tmp_path_factory.mktemp("report")
    model = where / "block.py"
    model.write_text(MODEL)
    out = where / "report.html"
    with pytest.raises(SystemExit) as info:
        main(["report", str(model), "-o", str(out)])
    assert info.value.code == 0
    return out, out.read_text()


def parse(text: str) -> ET.Element:
    """The page as XML: a parse error here is a page that is not well-formed."""
    return ET.fromstring(text.removeprefix("<!DOCTYPE html>\n"))


def test_page_is_well_formed_and_loads_nothing(page):
    _, text = page
    root = parse(text)
    assert root.tag == "html"
    assert not re.search(r"(?i)(https?:|ftp:|file:|//[a-z])", text.replace("// ", "")), "a URL in the page"
    assert root.find(".//script") is None and root.find(".//link") is None and root.find(".//img") is None
    assert "url(" not in text.replace("url(#arrow-", "")  # only the SVG's own markers
    for element in root.iter():
        for attr in ("href", "src"):
            value = element.get(attr)
            assert value is None or value.startswith("#"), (element.tag, attr, value)


def test_fusion_picture_has_the_kernels_as_clusters(page):
    _, text = page
    root = parse(text)
    svgs = root.findall(".//svg")
    assert len(svgs) == 2  # two graphs, split by the print
    first = svgs[0]
    kernels = [g for g in first.iter("g") if g.get("class") == "kernel"]
    clusters = [g.get("data-kernel") for g in kernels if g.get("data-kind") != "view"]
    assert any(g.get("data-kind") == "view" for g in kernels)  # the weight's transpose: drawn, no table row
    # the kernels of the graph's Kernels table, each a cluster of its picture
    graph0 = text[text.index('id="graph-block_0"'):text.index('id="graph-block_1"')]
    table = graph0[graph0.index("<h3>Kernels</h3>"):]
    table = table[:table.index("</table>")]
    listed = re.findall(r"<tr><td>(?:<a href=\"#kernel-[^\"]+\">)?(pipec_[a-z0-9_]+)", table)
    assert listed and sorted(clusters) == sorted(listed)
    assert any(re.fullmatch(r"pipec_fused_mm_add_gelu_\d+", k) for k in clusters), clusters
    nodes = [g.get("data-node") for g in first.iter("g") if g.get("class") == "node"]
    assert len(nodes) == len(set(nodes)) > 5
    # LayerNorm's reduction cannot be a matmul's epilogue: marked, with the reason
    rejected = [g for g in first.iter("g") if g.get("class") == "rejected"]
    assert rejected
    assert "a matmul epilogue holds only pointwise ops" in rejected[0].find("title").text


def test_page_sections(page):
    _, text = page
    assert "<h1>pipec report · block</h1>" in text
    assert "max error vs eager" in text and "within tolerance" in text
    assert 'print(&quot;a graph break&quot;)' in text  # the break's source line
    assert "block.py:13)" in text
    assert "<h2>Compile-time profile</h2>" in text and "first call (wall)" in text
    assert "@triton.jit" in text and "def pipec_fused_mm_add_gelu_" in text
    assert "warps=" in text and "cdiv(" in text  # launch configs and grid
    assert "# kernel plan for " in text  # the plan's IR text
    assert "not tuned: Triton&#x27;s interpreter runs the first config" in text or "one config" in text


def test_layout_keeps_each_op_inside_its_kernel():
    picture = {
        "inputs": [{"name": "x", "role": "input", "type": "float32[4]"}],
        "nodes": [{"name": f"n{i}", "op": op, "kind": kind, "inputs": [f"n{i - 1}" if i else "x"], "type": "f"}
                  for i, (op, kind) in enumerate([("exp", "pointwise"), ("sum", "reduction"), ("mm", "matmul"),
                                                  ("add", "pointwise"), ("relu", "pointwise")])],
        "kernels": [{"name": "k0", "kind": "reduction", "nodes": ["n0", "n1"]},
                    {"name": "k1", "kind": "matmul", "nodes": ["n2", "n3"]},
                    {"name": "k2", "kind": "pointwise", "nodes": ["n4"]}],
        "rejected": [{"first": "n1", "second": "n2", "reason": "why"}],
    }
    placed = report_svg.layout(picture)
    boxes = {i: (x, y, w, h) for i, x, y, w, h in placed["clusters"]}
    owner = {"x": -1, "n0": 0, "n1": 0, "n2": 1, "n3": 1, "n4": 2}
    for name, (cx, cy, w) in placed["nodes"].items():
        x, y, bw, bh = boxes[owner[name]]
        assert x <= cx - w / 2 and cx + w / 2 <= x + bw and y <= cy <= y + bh, name
    ys = [boxes[i][1] for i in (-1, 0, 1, 2)]
    assert ys == sorted(ys) and len(set(ys)) == 4  # a chain of kernels: one row each, in order
    svg = report_svg.fusion_svg(picture, uid="t")
    root = ET.fromstring(svg)
    assert [g.get("data-kernel") for g in root.iter("g") if g.get("class") == "kernel"] == ["k0", "k1", "k2"]
    assert 'marker id="arrow-t"' in svg


def test_unwritable_output_is_a_usage_error(capsys, tmp_path):
    code, _, err = run(["report", tmp_path / "missing.py", "-o", tmp_path / "no" / "r.html"], capsys)
    assert code == 2 and "its directory does not exist" in one_error_line(err)


# ---------------------------------------------------------------- headless Chromium

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def chromium(*args: str) -> str:
    """Run headless Chromium; its stderr (console messages are logged there as `:CONSOLE`)."""
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--enable-logging=stderr", "--v=0", *args],
                          capture_output=True, text=True, timeout=120, check=False)
    return done.stderr


def png_pixels(data: bytes):
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and color in (2, 6) and interlace == 0
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for r in range(height):
        kind, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, bpp, rows


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (CI installs Debian's chromium)")
def test_page_renders_in_headless_chromium(page, tmp_path):
    path, text = page
    shot = tmp_path / "page.png"
    log = chromium("--window-size=1200,1600", f"--screenshot={shot}", path.as_uri())
    assert ":CONSOLE" not in log, [ln for ln in log.splitlines() if ":CONSOLE" in ln]
    assert struct.unpack(">II", shot.read_bytes()[16:24]) == (1200, 1600)  # the PNG header's size
    # the first graph's picture alone, at its own size: its pixels are not all one colour
    svg = text[text.index("<svg"):text.index("</svg>") + len("</svg>")]
    w, h = (int(v) for v in re.search(r'width="(\d+)" height="(\d+)"', svg).groups())
    alone = tmp_path / "picture.html"
    alone.write_text(f'<!DOCTYPE html><html><body style="margin:0">{svg}</body></html>')
    shot = tmp_path / "picture.png"
    log = chromium(f"--window-size={w},{h}", f"--screenshot={shot}", alone.as_uri())
    assert ":CONSOLE" not in log, [ln for ln in log.splitlines() if ":CONSOLE" in ln]
    width, height, bpp, rows = png_pixels(shot.read_bytes())
    assert (width, height) == (w, h)
    white = bytes([255] * bpp)
    inked = sum(1 for row in rows for i in range(0, len(row), bpp) if bytes(row[i:i + bpp]) != white)
    assert inked > 0.03 * width * height  # boxes, text and arrows: a blank or broken SVG has ~none
    red = sum(1 for row in rows for i in range(0, len(row), bpp) if row[i] > 200 and row[i + 1] < 80 and row[i + 2] < 80)
    assert red > 20  # the rejected fusion's red marker is drawn


def test_a_mismatch_is_exit_1_with_the_page_written(fake_stages, capsys, model_file, tmp_path):
    out = tmp_path / "r.html"
    code, _, err = run(["report", model_file, "-o", out, "--runtime", "wrong", "--device", "cpu"], capsys)
    assert code == 1 and "differs" in one_error_line(err)
    text = out.read_text()
    parse(text)
    assert "MISMATCH" in text
