"""Time every example on the GPU: eager vs TorchInductor vs pipec, through `pipec bench`.

    python benchmarks/examples.py [--json out.json] [--dtype float32|bfloat16|float16] [--fusion NAME]

Each example runs in its own process as `pipec bench examples/NAME.py` (checked against eager
before it is timed with triton.testing.do_bench; see pipec.bench), once per fusion policy
given (default: default and aggressive). Prints each table; --json collects the results.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--fusion", action="append", help="fusion policy (repeatable; default: default, aggressive)")
    args = parser.parse_args()
    results, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted((ROOT / "examples").glob("*.py")):
            for fusion in args.fusion or ["default", "aggressive"]:
                out = pathlib.Path(tmp) / f"{path.stem}-{fusion}.json"
                code = subprocess.call([sys.executable, "-m", "pipec", "bench", str(path), "--dtype", args.dtype,
                                        "--fusion", fusion, "-o", str(out)])
                failed += code != 0
                if out.exists():
                    results.append({"example": path.stem, "fusion": fusion, "exit_code": code,
                                    **json.loads(out.read_text())})
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
