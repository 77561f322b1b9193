"""torch.histc as generated ops (decompositions.histc): the counts eager gives, for the bins a
mixture-of-experts router counts (integer-valued floats, and integers as on CUDA), for data
with edges and values outside the range, and for the data's own range (min == max)."""

import pytest
import torch

from pipec_capture.decompositions import histc

from conftest import dynamo_capture


@pytest.mark.parametrize("case", ["experts", "edges", "own_range", "one_value", "outside", "fp64"])
def test_the_counts_of_eager(case):
    g = torch.Generator().manual_seed(0)
    x, bins, lo, hi = {
        "experts": (torch.randint(0, 8, (64, 2), generator=g).float(), 8, 0, 7),
        "edges": (torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 0.999999, 1e-7]), 4, 0, 1),
        "own_range": (torch.randn(500, generator=g), 10, 0, 0),
        "one_value": (torch.full((7,), 3.0), 5, 0, 0),
        "outside": (torch.randn(300, generator=g) * 3, 6, -1.5, 2.0),
        "fp64": (torch.rand(200, generator=g, dtype=torch.float64) * 10, 7, 0, 10),
    }[case]
    expected = torch.histc(x, bins, lo, hi)
    assert torch.equal(histc(x, bins, lo, hi), expected)
    out, records = dynamo_capture(lambda t: torch.histc(t, bins, lo, hi), [x])  # lowered, interpreted, checked
    assert torch.equal(out, expected)
    assert [n.attr("target") for graph, _, _ in records for n in graph.nodes if n.op == "extern"] == []


def test_integer_ids_count_as_cudas_kernel_does():
    """CUDA's histc takes integers (transformers passes its expert ids as int there); the counts
    are those of the same values as floats."""
    ids = torch.randint(0, 16, (256,), generator=torch.Generator().manual_seed(1))
    got = histc(ids.int(), 16, 0, 15)
    assert got.dtype == torch.int32
    assert torch.equal(got.long(), torch.histc(ids.float(), 16, 0, 15).long())
