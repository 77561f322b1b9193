"""The shipped tuning table: what won in earlier measurements on a GPU family, so that a
default compile takes it without timing (docs/performance.md, "The tuning table").

Autotuning times a launch's candidate configs, and a GEMM choice group's alternatives, on
their first call; that was the largest part of a cold compile (10.5 s of BERT base's 28 s
on the H200). Most of those timings end the same way for the same kind of kernel on the
same sizes, so the runtime describes each timed decision by its *features* (not by the
kernel's body: a pointwise kernel of another model with the same candidates, sizes and
dtypes is the same decision):

- a launch: its candidate configs (which says what template or kernel kind it is), its
  size arguments rounded up to powers of two, and its pointers' dtypes; and, as a refinement,
  the *body*: how many times the kernel calls each Triton function (`tl.load`, `tl.sum`,
  `libdevice.erf`...): kernels of one kind on the same sizes but with different work (a
  layer_norm backward beside a softmax backward) may want different configs, and a decision
  whose runs disagree is left timed. A table entry is kept under the refined
  key and, where the bodies agree, under the coarse one (without the body), and a lookup tries
  the refined key first: a kernel whose body no run has seen still finds the coarse pick;
- a choice group: the timer, and per alternative its launches' candidate configs and its
  extern calls' targets, and the shapes (rounded up to powers of two) and dtypes of the
  values they read and write; and, as a refinement, the *exact* shapes of those values. A
  GEMM's alternatives (a Triton kernel with the epilogue on its tile, or cuBLAS and a
  pointwise kernel) cross over within one power of two: RoBERTa's query/key/value product
  (4096, 768) x (768, 768) rounds to (4096, 1024) x (1024, 1024), whose pick was the Triton
  template, 13.4 us a call in RoBERTa against cuBLAS's 10.4 (H100, session 39); its exact key
  now holds cuBLAS (benchmarks/results/README.md, session 39).

The tuning cache stores these features beside each timing (tuning_cache.py), and
`scripts/learn_tuning_table.py` turns the timings of many runs into a table per GPU family
(`tuning_tables/sm90.json`): for each feature key, the pick that was within `MARGIN` of
the fastest in every run seen, and only where there is one. At load time the runtime looks
a decision up after its own memo and the tuning cache, and times only what the table has
no entry for. Exhaustive modes (`max_autotune`) and the load option `tuning_table=False`
time everything.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter
from pathlib import Path

from .exprs import compile_ints

FORMAT = 1
TABLE_DIR = Path(__file__).parent / "tuning_tables"
# a pick is trusted when it was at most 5% slower than the fastest candidate in every timing seen
MARGIN = 1.05
# the name a runtime of this package keeps the loaded tables under in a LoadContext
MEMO_KEY = "pipec_runtime_cudagraph.tuning_table"


def pow2(n: int) -> int:
    """`n` rounded up to a power of two (0 and 1 stay as they are)."""
    n = int(n)
    return n if n <= 1 else 1 << (n - 1).bit_length()


def describe_config(config) -> str:
    """`XBLOCK=1 RBLOCK=4096 warps=8 stages=1`: a launch config as the tuning log and the table name it."""
    blocks = " ".join(f"{k}={v}" for k, v in config.constants)
    return f"{blocks} warps={config.num_warps} stages={config.num_stages}"


def feature_key(features: dict) -> str:
    return hashlib.sha256(json.dumps(features, sort_keys=True).encode()).hexdigest()[:32]


def gpu_family(device) -> str | None:
    """`sm90` for a Hopper GPU: the table a device reads; None off CUDA."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}"


def launch_features(launch, symvals: tuple) -> dict:
    """The features of a launch's config decision at `symvals` (see the module docstring)."""
    runner = launch.runner
    values, _grid = launch.dims if launch.static else launch.dims(*symvals)  # the kernel's size arguments
    dtypes = [str(runner.value_dtypes.get(i, "?")).removeprefix("torch.") for i in launch.ptrs]
    return {"kind": "launch", "configs": [describe_config(c) for c in launch.kernel.configs],
            "sizes": [pow2(v) for v in values], "dtypes": dtypes, "body": body_features(launch.kernel.source)}


_CALL = re.compile(r"\b(?:tl|gl|libdevice|tl\.math|tl\.extra\.cuda\.libdevice)\.(\w+)\(")


def body_features(source: str) -> list[list]:
    """[[function, calls], ...] of the Triton functions a kernel's source calls, by name (the
    refining feature: module docstring); names of values and nodes do not enter it. A new list
    each call (it goes into feature dicts that are stored)."""
    return [list(pair) for pair in _calls(source)]


@functools.lru_cache(maxsize=4096)
def _calls(source: str) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(Counter(_CALL.findall(source)).items()))


# the refining features: a launch's body, a choice group's exact shapes
REFINEMENTS = ("body", "exact")


def coarse(features: dict) -> dict | None:
    """`features` without the refinement, or None where there is none."""
    if not any(k in features for k in REFINEMENTS):
        return None
    return {k: v for k, v in features.items() if k not in REFINEMENTS}


def choice_features(runner, alternatives: dict[str, list], symvals: tuple, timer: str) -> dict:
    """The features of a choice group's decision at `symvals` (see the module docstring)."""
    types = {b.name: b.type for b in (*runner.program.inputs, *runner.program.buffers)}
    name_of = {i: n for n, i in runner.index.items()}

    exact: set[str] = set()

    def value(name) -> str:
        t = types.get(name)
        if t is None:
            return "?"
        try:
            sizes = compile_ints(list(t.shape), runner.symbols)(*symvals)
        except (KeyError, TypeError):  # a size no symbol value decides: a feature of its own
            return f"{t.dtype}?"
        exact.add(f"{t.dtype}{list(sizes)}")
        return f"{t.dtype}{[pow2(v) for v in sizes]}"

    parts = {}
    for alt in sorted(alternatives):
        steps = []
        for obj in alternatives[alt]:
            kernel = getattr(obj, "kernel", None)
            ir = getattr(obj, "ir", None)
            if kernel is not None:
                steps.append(["launch", [describe_config(c) for c in kernel.configs],
                              [value(name_of.get(i)) for i in obj.ptrs]])
            elif ir is not None:
                steps.append(["extern", ir.target, [value(v) for v in (*ir.inputs, *ir.outputs)]])
            else:
                steps.append(["other", type(obj).__name__])
        parts[alt] = steps
    return {"kind": "choice", "timer": timer, "alternatives": parts, "exact": sorted(exact)}


class TuningTable:
    """One GPU family's table: feature key -> the pick (a config description or an alternative name)."""

    def __init__(self, entries: dict[str, str] | None = None, source: str = ""):
        self.entries = dict(entries or {})
        self.source = source

    @classmethod
    def for_family(cls, family: str | None, directory: Path | None = None) -> TuningTable:
        """The shipped table of `family`; an empty one where there is none or it cannot be read
        (a table can only save time, never change a result: a pick is one of the candidates)."""
        if family is None:
            return cls()
        path = (directory or TABLE_DIR) / f"{family}.json"
        try:
            data = json.loads(path.read_text())
            if data.get("format") != FORMAT:
                return cls()
            entries = {k: v["pick"] for k, v in data["entries"].items() if isinstance(v.get("pick"), str)}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return cls()
        return cls(entries, str(path))

    def pick(self, features: dict) -> str | None:
        """The entry of the refined features, else of the coarse ones (module docstring)."""
        found = self.entries.get(feature_key(features))
        if found is None and (rough := coarse(features)) is not None:
            found = self.entries.get(feature_key(rough))
        return found

    def __len__(self) -> int:
        return len(self.entries)


def table_for(runner, device) -> TuningTable | None:
    """The table a runner consults on `device`, loaded once per model (its LoadContext), or None
    when the runner times everything (max_autotune, tuning_table=False) or is off CUDA."""
    if not runner.use_tuning_table:
        return None
    family = gpu_family(device)
    if family is None:
        return None
    tables = runner.context.memo(MEMO_KEY, dict)
    if family not in tables:
        tables[family] = TuningTable.for_family(family)
    return tables[family]


__all__ = ["FORMAT", "MARGIN", "REFINEMENTS", "TABLE_DIR", "TuningTable", "choice_features", "describe_config", "feature_key",
           "gpu_family", "launch_features", "pow2", "table_for"]
