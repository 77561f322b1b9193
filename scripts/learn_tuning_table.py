"""Learn the shipped tuning table of a GPU family from tuning-cache directories.

    python scripts/learn_tuning_table.py DIR [DIR ...] --family sm90 \
        [--out packages/runtime-cudagraph/src/pipec_runtime_cudagraph/tuning_tables/sm90.json] [--merge]

Each DIR is a pipec kernel cache (its `tuning/` folder) or a `tuning/` folder itself, filled by
compiles on a GPU of the family (`PIPEC_KERNEL_DIR`, or `PIPEC_CACHE_DIR`). Every timing
there that carries its features (runtime tuning_cache.py) is a sample; samples with the same
feature key are one decision (a launch's sample counts under its refined features, with the
kernel's body, and under the coarse ones, without). A decision enters the table only when one
candidate was within `MARGIN` (5%) of the fastest in every sample of it: where runs disagree, or a candidate failed
in one of them, the runtime keeps timing. `--merge` keeps the entries of an existing `--out`
that these samples do not contradict.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from pipec_runtime_cudagraph.tuning_table import FORMAT, MARGIN, TABLE_DIR, coarse, feature_key


def samples(directories: list[Path], family: str) -> tuple[dict[str, list[dict]], int]:
    """feature key -> the samples of that decision ({label: ms}); and how many files were skipped."""
    found: dict[str, list[dict]] = defaultdict(list)
    features_of: dict[str, dict] = {}
    skipped = 0
    for directory in directories:
        folder = directory / "tuning" if (directory / "tuning").is_dir() else directory
        for path in sorted(folder.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                features, labels, times = data["features"], data["labels"], data["times_ms"]
            except (OSError, ValueError, KeyError, TypeError):
                skipped += 1  # written before features were stored, or not a tuning file
                continue
            if data.get("family") != family or len(labels) != len(times) or len(labels) < 2:
                skipped += 1
                continue
            sample = {label: (math.inf if t is None else float(t)) for label, t in zip(labels, times)}
            # under the refined features (a launch's body) and the coarse ones: the runtime looks the
            # refined key up first, and the coarse entry serves kernels no run has seen
            for version in (features, coarse(features)):
                if version is not None:
                    key = feature_key(version)
                    features_of[key] = version
                    found[key].append(sample)
    return found, skipped


def decide(sample_list: list[dict]) -> tuple[str, float] | None:
    """(the pick, its worst ratio to the fastest) when one candidate was within MARGIN in every sample."""
    labels = set.intersection(*(set(s) for s in sample_list))
    best = None
    for label in sorted(labels):
        ratios = []
        for s in sample_list:
            fastest = min(s.values())
            if not math.isfinite(fastest) or fastest <= 0 or not math.isfinite(s[label]):
                ratios.append(math.inf)
            else:
                ratios.append(s[label] / fastest)
        worst = max(ratios)
        if best is None or worst < best[1]:
            best = (label, worst)
    return best if best is not None and best[1] <= MARGIN else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--family", required=True, help="the GPU family the samples come from, e.g. sm90")
    parser.add_argument("--out", type=Path, help="the table to write (default: the runtime's shipped table)")
    parser.add_argument("--merge", action="store_true", help="keep --out's entries these samples do not contradict")
    args = parser.parse_args(argv)
    out = args.out or TABLE_DIR / f"{args.family}.json"

    found, skipped = samples(args.dirs, args.family)
    entries, undecided = {}, 0
    for key, sample_list in found.items():
        decided = decide(sample_list)
        if decided is None:
            undecided += 1
            continue
        pick, worst = decided
        entries[key] = {"pick": pick, "samples": len(sample_list), "worst_ratio": round(worst, 4)}
    kept = 0
    if args.merge and out.exists():
        old = json.loads(out.read_text()).get("entries", {})
        for key, entry in old.items():
            if key not in found:
                entries[key] = entry
                kept += 1
    table = {"format": FORMAT, "family": args.family, "margin": MARGIN,
             "entries": dict(sorted(entries.items()))}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{out}: {len(entries)} entries ({kept} kept from before); {len(found)} decisions seen, "
          f"{undecided} without a pick within {MARGIN:g}x in every sample; {skipped} files skipped",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
