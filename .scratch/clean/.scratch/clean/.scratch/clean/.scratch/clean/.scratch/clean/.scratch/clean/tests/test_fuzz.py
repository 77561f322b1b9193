"""Differential fuzzing: random graphs through every fusion preset, against eager.

The suite runs a fixed set of programs (SHARDS x EXAMPLES, each shard seeded, so the
set is the same on every run and spreads over pytest-xdist workers);
`python scripts/fuzz.py --count N` runs as many more as you like. Hypothesis
shrinks a failing program to a small repro and prints it.
"""

import os

from hypothesis import HealthCheck, given, seed, settings

from fuzz_graphs import programs
from fuzz_pipeline import check_program

SHARDS = 6
EXAMPLES = int(os.environ.get("PIPEC_FUZZ_EXAMPLES", "35"))  # per shard: 210 programs in all


def _shard(k):
    @seed(1000 + k)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(programs())
    def test(prog):
        counts = check_program(prog)
        assert counts["none"] >= counts["default"] >= counts["aggressive"], counts

    test.__name__ = f"test_random_graphs_match_eager_shard{k}"
    return test


for _k in range(SHARDS):
    globals()[f"test_random_graphs_match_eager_shard{_k}"] = _shard(_k)
