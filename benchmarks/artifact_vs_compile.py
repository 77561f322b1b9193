"""An exported artifact against `pipec.compile` on the same model, in one process: time per
call (triton.testing.do_bench median), launches and library calls of each program, max error
against eager.

    python benchmarks/artifact_vs_compile.py --cases vit,gpt2 --out $OUT/artifact.json     # H200, real size
    python benchmarks/artifact_vs_compile.py --cases vit --tiny                            # CPU smoke test

Cases are the real-model suite's (tests/real_models/hf_models.py) at their main real shape, or
the tiny configs with `--tiny`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "real_models"))


def _program_counts(program) -> dict:
    return {"launches": sum(s.kind == "launch" for s in program.steps),
            "externs": sum(s.kind == "extern" for s in program.steps)}


def _time(fn, inputs, device: str) -> float | None:
    if device != "cuda":
        return None
    from triton.testing import do_bench
    with torch.no_grad():
        return round(do_bench(lambda: fn(*inputs), warmup=25, rep=100), 4)


def _max_error(got, expected) -> float:
    return max(((g.float() - e.float()).abs().max().item() for g, e in zip(_flat(got), _flat(expected))), default=0.0)


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def measure(name: str, tiny: bool, device: str) -> dict:
    import hf_models

    import pipec

    size = hf_models.TINY if tiny else hf_models.REAL
    built = hf_models.build(name, size, device)
    with torch.no_grad():
        expected = built.model(*built.inputs)
        compiled = pipec.compile(built.model)
        got_compiled = compiled(*built.inputs)
        with tempfile.TemporaryDirectory() as d:
            pipec.export(built.model, built.inputs, f"{d}/model.pipec")
            artifact = pipec.load(f"{d}/model.pipec")
        got_artifact = artifact(*built.inputs)
    row = {
        "case": built.name, "dtype": str(built.dtype),
        "eager_ms": _time(built.model, built.inputs, device),
        "compile_ms": _time(compiled, built.inputs, device),
        "artifact_ms": _time(artifact, built.inputs, device),
        "compile_program": [_program_counts(g.program) for g in compiled.pipec_session.graphs],
        "artifact_program": _program_counts(artifact._runner.program),
        "max_error_compile": _max_error(got_compiled, expected),
        "max_error_artifact": _max_error(got_artifact, expected),
    }
    if row["compile_ms"] and row["artifact_ms"]:
        row["artifact_vs_compile"] = round(row["compile_ms"] / row["artifact_ms"], 3)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="vit,gpt2")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    rows = []
    for name in args.cases.split(","):
        row = measure(name, args.tiny, args.device)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"torch": torch.__version__, "device": args.device,
                                              "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
                                              "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
