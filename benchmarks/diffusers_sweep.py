"""The diffusion models of the real-model suite (tests/real_models/diffusers_models.py), tiny,
through pipec against eager, in every mode a user compiles a denoiser in:

    python benchmarks/diffusers_sweep.py --out sweep.jsonl              # every case and mode, a process each
    python benchmarks/diffusers_sweep.py --out s.jsonl --only flux --modes train
    python benchmarks/diffusers_sweep.py --out s.jsonl --device cuda    # compiled Triton kernels on a GPU

Modes: `fullgraph` (`pipec.compile(model, fullgraph=True)` under no_grad, diffusers' recipe),
`train` (a loss of the prediction, every parameter's gradient; random ops such as DiT's class-label
dropout draw from torch's generator, `fallback_random`, seeded as eager's), `resize` (one compiled model
called at 8 x 8, 16 x 16 and 12 x 12 latents: Dynamo makes the second graph dynamic; the third
reuses it; not Flux, whose packed latent tokens come with position ids). One JSON line per case and mode: status (ok / mismatch / error), max error, pipec's
warnings (a fallback of any kind), seconds. Tolerances: 1e-4 (outputs), 1e-3 relative (gradients).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("fullgraph", "train", "resize")


def run_one(name: str, mode: str, device: str) -> dict:
    import torch

    sys.path.insert(0, str(REPO / "tests" / "real_models"))
    import diffusers_models as dm

    import pipec

    row = {"case": name, "mode": mode, "device": device, "status": "ok", "max_abs_err": 0.0}
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            row["max_abs_err"] = _MODES[mode](dm, pipec, torch, name, device)
        except AssertionError as e:
            row["status"], row["error"] = "mismatch", str(e).splitlines()[0][:300]
        except Exception as e:  # noqa: BLE001 - the sweep reports every failure as a row
            row["status"], row["error"] = "error", f"{type(e).__name__}: {str(e)[:300]}"
            row["traceback"] = traceback.format_exc().splitlines()[-6:]
    row["seconds"] = round(time.perf_counter() - start, 1)
    row["warnings"] = sorted({str(w.message)[:600] for w in caught if "pipec" in str(w.message)
                              and "plugin" not in str(w.message)})
    return row


def _close(got, expected, atol=1e-4, rtol=1e-4) -> float:
    import torch

    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    return (got.float() - expected.float()).abs().max().item()


def _fullgraph(dm, pipec, torch, name, device):
    built = dm.build(name, device=device)
    with torch.no_grad():
        expected = built.model(*built.inputs)
        return _close(pipec.compile(built.model, fullgraph=True)(*built.inputs), expected)


def _train(dm, pipec, torch, name, device):
    eager, mine = dm.build(name, device=device, train=True), dm.build(name, device=device, train=True)
    # random ops (DiT's class-label dropout) through torch's generator, seeded alike: eager's draws
    torch.manual_seed(0)
    expected = eager.model(*eager.inputs)
    (expected.float() ** 2).mean().backward()
    torch.manual_seed(0)
    got = pipec.compile(mine.model, fallback_random=True)(*mine.inputs)
    (got.float() ** 2).mean().backward()
    worst = _close(got, expected)
    for p, q in zip(mine.model.parameters(), eager.model.parameters()):
        if q.grad is not None:
            worst = max(worst, _close(p.grad, q.grad, atol=1e-4, rtol=1e-3))
    return worst


def _resize(dm, pipec, torch, name, device):
    built = dm.build(name, device=device)
    compiled = pipec.compile(built.model)
    g = torch.Generator().manual_seed(3)
    latents, worst = built.inputs[0], 0.0
    for side in (8, 16, 12):
        inputs = (torch.randn(*latents.shape[:-2], side, side, generator=g).to(device), *built.inputs[1:])
        with torch.no_grad():
            worst = max(worst, _close(compiled(*inputs), built.model(*inputs)))
    return worst


_MODES = {"fullgraph": _fullgraph, "train": _train, "resize": _resize}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="JSON lines, one per case and mode (appended)")
    ap.add_argument("--only", help="comma-separated cases")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--budget", type=float, default=900, help="seconds per case and mode")
    ap.add_argument("--one", nargs=2, metavar=("CASE", "MODE"), help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(*args.one, args.device)))
        return 0
    sys.path.insert(0, str(REPO / "tests" / "real_models"))
    import diffusers_models as dm

    names = args.only.split(",") if args.only else [c.name for c in dm.CASES]
    for name in names:
        for mode in args.modes.split(","):
            case = dm.BY_NAME[name]
            if (mode == "train" and not case.train) or (mode == "resize" and not case.resizable):
                continue
            cmd = [sys.executable, __file__, "--one", name, mode, "--device", args.device]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.budget)
                lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
                row = json.loads(lines[-1]) if lines else {
                    "case": name, "mode": mode, "status": "error", "error": done.stderr.strip().splitlines()[-1:]}
            except subprocess.TimeoutExpired:
                row = {"case": name, "mode": mode, "status": "timeout", "seconds": args.budget}
            print(f"{name:16} {mode:10} {row['status']:9} {row.get('max_abs_err')!s:24} {row.get('seconds')} s "
                  f"{row.get('error', '')}", flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
