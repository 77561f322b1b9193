"""Greedy decoding through a compiled forward, for every causal LM of hf_sweep_archs.py.

What a user of a decoder does after `compile`: `model.generate(...)` with the forward compiled.
The prefill, the first decode step and the dynamic-length steps after it are different graphs
(the KV cache grows by one token a step), so this tries symbolic shapes across each
architecture's attention masks, rotary tables and caches, which one forward does not. For each
architecture it records whether the tokens equal eager's, the largest difference of the scores
at any step, the graphs compiled and every pipec warning, one JSON line each:

    python benchmarks/generate_sweep.py --out generate.jsonl [--only llama,mistral] [--cache static]

CPU: tiny configs (2 layers, hidden 32), kernels in Triton's interpreter (set TRITON_INTERPRET=1).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hf_sweep import build  # noqa: E402
from hf_sweep_archs import ARCHS  # noqa: E402

NEW_TOKENS = 6


def causal_lms() -> list[str]:
    return [name for name, (_, _, model_cls, kind) in ARCHS.items()
            if kind == "lm" and model_cls.endswith("ForCausalLM")]


def run_one(name: str, cache: str) -> dict:
    import pipec

    model, inputs, _ = build(name)
    ids = inputs["input_ids"]
    settings = dict(max_new_tokens=NEW_TOKENS, do_sample=False, output_scores=True, return_dict_in_generate=True,
                    pad_token_id=0, eos_token_id=None)
    if cache == "static":
        model.generation_config.cache_implementation = "static"
    row = {"arch": name, "cache": cache}
    with torch.no_grad():
        expected = model.generate(ids, **settings)
        torch._dynamo.reset()
        model.forward = pipec.compile(model.forward, fullgraph=cache == "static")
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = model.generate(ids, **settings)
        row["seconds"] = round(time.perf_counter() - start, 2)
    row["tokens_equal"] = bool(torch.equal(got.sequences, expected.sequences))
    row["max_score_err"] = max(float((a - b).abs().max()) for a, b in zip(got.scores, expected.scores))
    row["graphs"] = len(model.forward.pipec_session.graphs) if hasattr(model.forward, "pipec_session") else None
    row["warnings"] = sorted({str(w.message)[:240] for w in caught if "pipec" in str(w.message)})
    row["status"] = "ok" if row["tokens_equal"] and row["max_score_err"] < 1e-4 else "mismatch"
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON lines file (appended)")
    parser.add_argument("--only", default="", help="comma-separated architectures (default: every causal LM)")
    parser.add_argument("--cache", choices=("dynamic", "static"), default="dynamic")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or causal_lms()
    unknown = sorted(set(names) - set(ARCHS))
    if unknown:
        parser.error(f"unknown architectures: {', '.join(unknown)}")
    with open(args.out, "a") as out:
        for name in names:
            try:
                row = run_one(name, args.cache)
            except Exception as exc:  # one architecture's failure is a row, not the end of the sweep
                row = {"arch": name, "cache": args.cache, "status": "error",
                       "error": f"{type(exc).__name__}: {str(exc)[:400]}",
                       "where": traceback.format_exc().splitlines()[-6:]}
            print(json.dumps(row), file=out, flush=True)
            print(f"{name:16} {row['status']:9} {row.get('seconds', '')} {row.get('error', '')[:120]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
