"""Gathers are kept out of reductions over the leading dimension (heuristics.py,
`gathers_into_column_reduction`): merged, they would run in one program per kept row."""

import pytest

from pipec_fusion import PRESETS, GroupInfo


def _group(kind, ops, domain=(32, 64, 112, 112), reduce_dims=()):
    return GroupInfo(kind=kind, nodes=tuple(f"n{i}" for i in range(len(ops))), ops=tuple(ops),
                     domain=domain, reduce_dims=reduce_dims, numel=32 * 64 * 112 * 112)


POOL_BACKWARD = _group("pointwise", ("iota", "take", "eq", "where", "add", "cast"))
CHANNEL_SUMS = _group("reduction", ("cast", "sum"), reduce_dims=(0, 2, 3))  # a batch norm's, over [N, H, W]
ROW_SUMS = _group("reduction", ("cast", "sum"), domain=(4096, 768), reduce_dims=(1,))  # a layer norm's


@pytest.mark.parametrize("policy", ["default", "aggressive"])
def test_gathers_stay_out_of_a_reduction_over_the_batch(policy):
    h = PRESETS[policy]()
    assert h.score(POOL_BACKWARD, CHANNEL_SUMS, "vertical") is None
    assert "gathers" in h.why_not(POOL_BACKWARD, CHANNEL_SUMS, "vertical")
    # without gathers the same pair fuses, and gathers fuse into a row reduction (an embedding's
    # rows into the layer norm after them)
    plain = _group("pointwise", ("cast", "mul", "add"))
    assert h.score(plain, CHANNEL_SUMS, "vertical") is not None
    embedding = _group("pointwise", ("iota", "take", "add"), domain=(4096, 768))
    assert h.score(embedding, ROW_SUMS, "vertical") is not None
