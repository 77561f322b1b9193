"""benchmarks/host_statements.py: a specialized run rebuilt with a clock reading after each
top-level statement. The run's input checks are a block (`if not G.same(inputs):` and its
Python checks); the clock reads after the whole block, so the rebuilt run compiles and returns
what the run returns."""

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from host_statements import instrument  # noqa: E402

from pipec_runtime_cudagraph.pysource import compile_source  # noqa: E402

SOURCE = [
    "def run(inputs, stream, owned=False):",
    "    v0, v1 = inputs",
    "    if not G_1.same(inputs):",
    "        if v0 != 2: return None",
    "        G_1.learn(inputs)",
    "    v2 = EMPTY(3)",
    "    L_2(stream, v0, v1, v2)",
    "    v0 = v1 = None",
    "    return [v2]",
]


class Guard:
    def same(self, inputs):
        return False

    def learn(self, inputs):
        pass


def test_the_input_checks_block_is_timed_as_one_statement():
    launched = []
    namespace = {"G_1": Guard(), "EMPTY": lambda n: [0] * n, "L_2": lambda *a: launched.append(a)}
    run = compile_source(SOURCE, namespace, "<run>")
    totals = collections.defaultdict(int)
    timed, kinds = instrument(None, None, run, totals, "g")
    assert timed([2, 5], "s") == [[0, 0, 0]] and len(launched) == 1
    assert timed([3, 5], "s") is None  # a failed check still returns from inside the block
    assert kinds == {"guards": 2, "alloc": 1, "launch": 1, "release": 1, "other": 1}
    assert {"g:guards", "g:alloc", "g:launch", "g:release"} <= set(totals)
