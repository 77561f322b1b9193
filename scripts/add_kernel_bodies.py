"""Add the `body` feature to launch timings written before it existed (a tuning cache from an
older pipec), so that `learn_tuning_table.py` can learn refined entries from them.

    python scripts/add_kernel_bodies.py KERNEL_DIR OUT_DIR --device "NVIDIA H200" --triton 3.6.0

KERNEL_DIR is a pipec kernel cache (`PIPEC_KERNEL_DIR`): its kernel sources (`*.py`) and its
`tuning/` folder. A timing file is named by the tuning key of its kernel (body digest, size
bucket, GPU name, Triton version: runtime `autotune.tuning_keys`); the kernel is found by
computing that key for every kernel source and candidate config list seen, then its body
features are added. Files that match no source (choice groups, other buckets) are copied as
they are. OUT_DIR gets a `tuning/` folder to pass to learn_tuning_table.py.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from pipec_ir import LaunchConfig, TritonKernel
from pipec_runtime_cudagraph.kernels import body_digest
from pipec_runtime_cudagraph.tuning_cache import tuning_key
from pipec_runtime_cudagraph.tuning_table import body_features

_KERNEL_DEF = re.compile(r"@(?:triton|gluon)\.jit[^\n]*\ndef (\w+)\(")


def parse_config(label: str) -> LaunchConfig:
    """The LaunchConfig a `describe_config` label names (`XBLOCK=4 RBLOCK=1024 warps=8 stages=1`)."""
    *blocks, warps, stages = label.split()
    return LaunchConfig(constants=tuple((k, int(v)) for k, v in (b.split("=") for b in blocks)),
                        num_warps=int(warps.split("=")[1]), num_stages=int(stages.split("=")[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernel_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--device", required=True, help="the GPU name the timings were made on")
    parser.add_argument("--triton", required=True, help="the Triton version they were made with")
    args = parser.parse_args(argv)

    timings = {p.stem: json.loads(p.read_text()) for p in sorted((args.kernel_dir / "tuning").glob("*.json"))}
    config_lists = {tuple(d["labels"]) for d in timings.values() if d.get("features", {}).get("kind") == "launch"}
    sources = {}
    for path in sorted(args.kernel_dir.glob("*.py")):
        source = path.read_text()
        for name in _KERNEL_DEF.findall(source):
            for labels in config_lists:
                kernel = TritonKernel(name=name, source=source, args=(), sizes=(), grid=(),
                                      configs=tuple(parse_config(label) for label in labels))
                sources[tuning_key(body_digest(kernel), (), args.device, args.triton)] = source
    out = args.out_dir / "tuning"
    out.mkdir(parents=True, exist_ok=True)
    found = 0
    for key, data in timings.items():
        if key in sources and data.get("features", {}).get("kind") == "launch":
            data["features"]["body"] = body_features(sources[key])
            found += 1
        (out / f"{key}.json").write_text(json.dumps(data))
    print(f"{out}: {len(timings)} timings, {found} given their kernel's body", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
