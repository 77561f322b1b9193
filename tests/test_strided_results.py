"""Library results laid out other than row-major (attention's output and gradients: [batch, heads,
seq, dim] stored as [batch, seq, heads, dim]) are read through their views, not copied row-major
first: the capture marks them `strided`, and fusion reads a view taken straight off one as a tensor
of its own (docs/IR.md, "extern"). BERT base's training step made two ATen copies of each of its 36
attention gradients before (1.6 ms of its 13.8 ms of GPU time on the H200)."""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F

import pipec


def attention_then_rows(x, w):
    b, length, _ = x.shape
    q = (x @ w).view(b, length, 2, 16).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, q, q)
    return out.transpose(1, 2).reshape(b, length, 32).sum(1)  # a kernel reading the result through views


def _steps(dump_dir) -> list[str]:
    (text,) = [p.read_text() for p in dump_dir.glob("*.codegen.txt")]
    return [line.strip() for line in text.splitlines() if " = launch " in line or " = extern " in line]


def test_a_kernel_reads_a_strided_result_through_its_view(tmp_path):
    torch.manual_seed(0)
    x, w = torch.randn(2, 8, 32), torch.randn(32, 32)
    compiled = pipec.compile(attention_then_rows, dump_dir=str(tmp_path), cache="none")
    torch.testing.assert_close(compiled(x, w), attention_then_rows(x, w))
    (capture,) = [p.read_text() for p in tmp_path.glob("*.capture.txt")]
    assert re.search(r"_scaled_dot_product_\w+ = extern\(.*strided=\[0", capture)  # the output is strided
    steps = _steps(tmp_path)
    (read,) = [re.match(r".* = launch pipec_sum_\d+\((\w+)", s).group(1) for s in steps if "launch pipec_sum" in s]
    made_by = next(s for s in steps if s.startswith(f"{read} = "))
    assert "extern aten.permute" in made_by, made_by  # the view, made by its call: row-major, not copied


def test_row_major_results_are_not_marked():
    from pipec_capture.lowerer import _strided_results

    row_major = torch.empty(4, 6)
    assert _strided_results(row_major) == ()
    assert _strided_results((row_major, row_major.t(), 3)) == (1,)
    assert _strided_results(torch.empty(2, 3, 4).transpose(0, 1)) == (0,)
