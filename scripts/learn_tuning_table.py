"""Learn the shipped tuning table of a GPU family from tuning-cache directories.

    python scripts/learn_tuning_table.py DIR [DIR ...] --family sm90 \
        [--out packages/runtime-cudagraph/src/pipec_runtime_cudagraph/tuning_tables/sm90.json] [--merge]

Each DIR is a pipec kernel cache (its `tuning/` folder) or a `tuning/` folder itself, filled by
compiles on a GPU of the family (`PIPEC_KERNEL_DIR`, or `PIPEC_CACHE_DIR`). Every timing
there that carries its features (runtime tuning_cache.py) is a sample; samples with the same
feature key are one decision (a sample counts under its refined features, with a launch's kernel
body or a choice group's exact shapes, and under the coarse ones, without). A decision enters the table only when one
candidate was within `MARGIN` (5%) of the fastest in every sample of it, or, for a decision of many
samples whose spread is timing noise (the same kernel in every layer), by their median
(`decide_noisy`); where runs disagree otherwise, or a candidate failed in one of them, the
runtime keeps timing. `--merge` keeps the entries of an existing `--out`
that these samples do not contradict.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from pipec_runtime_cudagraph.tuning_table import FORMAT, MARGIN, REFINEMENTS, TABLE_DIR, coarse, feature_key

# a decision left open by disagreeing samples is decided by their median from this many on
NOISY_MIN_SAMPLES = 5


def samples(directories: list[Path], family: str) -> tuple[dict[str, list[dict]], set[str], int]:
    """feature key -> the samples of that decision ({label: ms}); the refined keys (a launch's
    body, a choice group's exact shapes); and how many files were skipped."""
    found: dict[str, list[dict]] = defaultdict(list)
    refined: set[str] = set()
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
            # under the refined features (a launch's body, a choice group's exact shapes) and the
            # coarse ones: the runtime looks the refined key up first, and the coarse entry serves
            # kernels and sizes no run has seen
            for version in (features, coarse(features)):
                if version is not None:
                    key = feature_key(version)
                    found[key].append(sample)
                    if any(k in version for k in REFINEMENTS):
                        refined.add(key)
    return found, refined, skipped


def _ratios(sample_list: list[dict], label: str) -> list[float]:
    """`label`'s time over the fastest candidate's, per sample (inf where it or every candidate failed)."""
    ratios = []
    for s in sample_list:
        fastest = min(s.values())
        if not math.isfinite(fastest) or fastest <= 0 or not math.isfinite(s[label]):
            ratios.append(math.inf)
        else:
            ratios.append(s[label] / fastest)
    return ratios


def decide(sample_list: list[dict]) -> tuple[str, float] | None:
    """(the pick, its worst ratio to the fastest) when one candidate was within MARGIN in every sample."""
    labels = set.intersection(*(set(s) for s in sample_list))
    best = None
    for label in sorted(labels):
        worst = max(_ratios(sample_list, label))
        if best is None or worst < best[1]:
            best = (label, worst)
    return best if best is not None and best[1] <= MARGIN else None


def decide_noisy(sample_list: list[dict]) -> tuple[str, float] | None:
    """(the pick, its median ratio to the fastest) for a decision of many samples that `decide`
    leaves open because timing noise, not the kernels, disagrees.

    Only for refined keys (the caller's rule): their samples are the same kernel body on the same
    sizes (twelve layers of one model), so a spread between them is noise. Noise only ever adds time: a pick is
    trusted when, over at least NOISY_MIN_SAMPLES samples, its median ratio to the fastest is
    within MARGIN, it never failed, and its quickest time is within MARGIN of the quickest time
    any candidate reached.
    """
    if len(sample_list) < NOISY_MIN_SAMPLES:
        return None
    labels = sorted(set.intersection(*(set(s) for s in sample_list)))
    quickest = {label: min(s[label] for s in sample_list) for label in labels}
    floor = min(quickest.values(), default=math.inf)
    best = None
    for label in labels:
        ratios = _ratios(sample_list, label)
        if not all(math.isfinite(r) for r in ratios) or quickest[label] > MARGIN * floor:
            continue
        median = statistics.median(ratios)
        if best is None or median < best[1]:
            best = (label, median)
    return best if best is not None and best[1] <= MARGIN else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--family", required=True, help="the GPU family the samples come from, e.g. sm90")
    parser.add_argument("--out", type=Path, help="the table to write (default: the runtime's shipped table)")
    parser.add_argument("--merge", action="store_true", help="keep --out's entries these samples do not contradict")
    args = parser.parse_args(argv)
    out = args.out or TABLE_DIR / f"{args.family}.json"

    found, refined, skipped = samples(args.dirs, args.family)
    entries, undecided, by_median = {}, 0, 0
    for key, sample_list in found.items():
        decided = decide(sample_list)
        if decided is not None:
            pick, worst = decided
            entries[key] = {"pick": pick, "samples": len(sample_list), "worst_ratio": round(worst, 4)}
            continue
        noisy = decide_noisy(sample_list) if key in refined else None
        if noisy is None:
            undecided += 1
            continue
        pick, median = noisy
        entries[key] = {"pick": pick, "samples": len(sample_list), "median_ratio": round(median, 4)}
        by_median += 1
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
          f"{by_median} decided by the median of >= {NOISY_MIN_SAMPLES} noisy samples, {undecided} without a pick; "
          f"{skipped} files skipped",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
