"""Tuning-cache samples from a real-model suite run's tuning log, for learn_tuning_table.py.

    PIPEC_HF_MODEL=bert python scripts/suite_tuning_samples.py RESULTS.json OUT/tuning
    python scripts/learn_tuning_table.py OUT --family sm90 --merge

`benchmarks/real_models.py` keeps, per case, what pipec's cold default-mode compile timed on the
GPU (the `pipec.tuning` log: each timed kernel with every config's time). The tuning cache
files that `learn_tuning_table.py` learns from are gone with the GPU machine, so this script
rebuilds them: it compiles the case's Programs here (Dynamo and pipec's stages, no kernel run;
benchmarks/memory.py `compiled_programs`), finds each launch the shipped table has no pick for
whose kernel the log timed (kernel names match up to their number), computes its features
(runtime tuning_table.py `launch_features`) and writes one sample per distinct feature set with
the logged times. Features are computed with this machine's capture passes: where a pass
depends on the device (convolution layouts), a Program built off CUDA may differ from the GPU's,
and its samples key a decision the GPU never asks for (harmless: that entry never matches).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

LINE = re.compile(r"(\w+?)_\d+: config \d+ of \d+ .*; all: ([\d. ]+)$")


def logged_times(results: Path, case: str) -> dict[str, list[float]]:
    """kernel name without its number -> every config's time (ms), from the case's pipec row."""
    rows = [r for r in json.loads(results.read_text())["cases"] if r["case"] == case]
    if not rows:
        raise SystemExit(f"{results}: no case {case!r}")
    times = {}
    for line in (rows[0].get("rows") or {}).get("pipec", {}).get("tuning") or []:
        found = LINE.match(line)
        if found:
            times[found.group(1)] = [float(t) for t in found.group(2).split()]
    return times


def main(argv: list[str]) -> int:
    if len(argv) != 2 or "PIPEC_HF_MODEL" not in os.environ:
        raise SystemExit(__doc__.split("\n\n")[1])
    import memory
    from pipec_ir import CompileOptions
    from pipec_runtime_cudagraph import load_launch
    from pipec_runtime_cudagraph.steps import LaunchStep
    from pipec_runtime_cudagraph.tuning_table import TuningTable, describe_config, launch_features

    results, out = Path(argv[0]), Path(argv[1])
    case = os.environ["PIPEC_HF_MODEL"]
    timed = logged_times(results, case)
    model, inputs = memory.load("benchmarks/models/hf_model.py", "example_inputs")
    table = TuningTable.for_family("sm90")
    out.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    for program in memory.compiled_programs(model, inputs, cache="none"):
        run = load_launch(program, CompileOptions(runtime="launch"))
        runner = getattr(run, "runner", run)
        for step in (s for plan in runner.plans.values() for s, _ in plan if isinstance(s, LaunchStep)):
            prefix = re.sub(r"_\d+$", "", step.kernel.name)
            features = launch_features(step, ())
            labels = [describe_config(c) for c in step.kernel.configs[:runner.autotune_configs]]
            key = json.dumps(features, sort_keys=True)
            if prefix not in timed or key in written or table.pick(features) is not None:
                continue
            times = timed[prefix]
            if len(times) != len(labels):  # another kernel of that name, or another config list
                continue
            written.add(key)
            path = out / f"{case}_{prefix}.json"
            path.write_text(json.dumps({"chosen": times.index(min(times)), "times_ms": times, "family": "sm90",
                                        "features": features, "labels": labels}))
            print(f"{path}: {labels[times.index(min(times))]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
