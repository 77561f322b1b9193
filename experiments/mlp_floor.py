"""How fast can the issue-6 MLP go on this GPU? Its GEMMs alone, against pipec, in one process.

    python experiments/mlp_floor.py --out $OUT/mlp_floor.json

The MLP is Linear(2048 -> 8192) -> GELU -> Linear(8192 -> 2048) on 8192 bf16 rows (0.55 TFLOP).
Besides eager, Inductor and pipec, this times what no MLP implementation built from the same GEMM
engine can beat: cuBLAS's two GEMMs with no bias and no GELU (`floor`), chained as in the MLP.
Then each half alone, so the end-to-end time can be compared with the sum of its parts: pipec's
GEMM1 + bias + GELU and its GEMM2 + bias, cuBLAS's GEMM1 and GEMM2.

Timing is the suite's: triton.testing.do_bench median, warm-up 25 ms, rep 100 ms (sustained, so the
GPU sits at its power cap as in the suite), ROUNDS rounds with the variants in rotated order; the
median over rounds is reported. While each measurement runs, nvidia-smi samples board power and SM
clock every 20 ms; their means (over do_bench's L2 flushes too) are reported with the times.

Numerics: eager's and pipec's outputs are checked against an fp32 reference of the MLP (the floor
variants compute something else and are not checked; they are timing references only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

M, D, H = 8192, 2048, 8192
ROUNDS = 5


class PowerSampler:
    """nvidia-smi in the background: mean board power (W) and SM clock (MHz) while it runs."""

    def __enter__(self):
        cmd = ["nvidia-smi", "--query-gpu=power.draw,clocks.sm", "--format=csv,noheader,nounits", "-lms", "20"]
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
        return self

    def __exit__(self, *exc):
        self.watts = self.mhz = None
        if self.proc is None:
            return
        self.proc.terminate()
        out, _ = self.proc.communicate()
        samples = []
        for line in out.splitlines():
            try:
                samples.append(tuple(float(v) for v in line.split(",")))
            except ValueError:
                continue
        if samples:
            self.watts = statistics.fmean(s[0] for s in samples)
            self.mhz = statistics.fmean(s[1] for s in samples)


def make_variants():
    import pipec

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.Linear(H, D)).to("cuda", torch.bfloat16).eval()
    x = torch.randn(M, D, device="cuda", dtype=torch.bfloat16)
    up, down = model[0], model[2]
    hidden = F.gelu(up(x))
    w1t, w2t = up.weight.t(), down.weight.t()

    with torch.no_grad():
        pipec_mlp = pipec.compile(model)
        pipec_up = pipec.compile(nn.Sequential(up, nn.GELU()))
        pipec_down = pipec.compile(down)
        inductor = torch.compile(model)
    variants = {
        "eager": lambda: model(x),
        "inductor (default)": lambda: inductor(x),
        "pipec": lambda: pipec_mlp(x),
        "floor: cuBLAS GEMM1 -> GEMM2, no bias, no GELU": lambda: torch.mm(torch.mm(x, w1t), w2t),
        "pipec GEMM1 + bias + GELU": lambda: pipec_up(x),
        "pipec GEMM2 + bias": lambda: pipec_down(hidden),
        "cuBLAS GEMM1": lambda: torch.mm(x, w1t),
        "cuBLAS GEMM2": lambda: torch.mm(hidden, w2t),
    }
    return model, x, variants


def check(model, x, variants) -> dict:
    ref = nn.functional.linear(F.gelu(nn.functional.linear(x.float(), model[0].weight.float(), model[0].bias.float())),
                               model[2].weight.float(), model[2].bias.float())
    errors = {}
    with torch.no_grad():
        for name in ("eager", "inductor (default)", "pipec"):
            got = variants[name]().float()
            torch.testing.assert_close(got, ref, atol=1e-2, rtol=1.6e-2)
            errors[name] = (got - ref).abs().max().item()
    return errors


def main() -> int:
    import triton
    import triton.testing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results here as JSON")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("mlp_floor.py needs a CUDA GPU", file=sys.stderr)
        return 2

    started = time.time()
    model, x, variants = make_variants()
    errors = check(model, x, variants)
    names = list(variants)
    sustained = {n: [] for n in names}
    power = {n: [] for n in names}
    with torch.no_grad():
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                with PowerSampler() as sampler:
                    ms = triton.testing.do_bench(variants[name], warmup=25, rep=100, return_mode="median")
                sustained[name].append(ms)
                power[name].append((sampler.watts, sampler.mhz))
            print(f"round {r + 1}: " + ", ".join(f"{n.split(':')[0]} {sustained[n][-1]:.4f}" for n in names), flush=True)

    rows = []
    for name in names:
        watts = [w for w, _ in power[name] if w is not None]
        mhz = [c for _, c in power[name] if c is not None]
        rows.append({"variant": name, "ms": statistics.median(sustained[name]), "ms_rounds": sustained[name],
                     "watts": statistics.fmean(watts) if watts else None,
                     "sm_mhz": statistics.fmean(mhz) if mhz else None, "max_error": errors.get(name)})
    by = {row["variant"]: row["ms"] for row in rows}
    parts = {"pipec parts": by["pipec GEMM1 + bias + GELU"] + by["pipec GEMM2 + bias"],
             "cuBLAS parts": by["cuBLAS GEMM1"] + by["cuBLAS GEMM2"]}
    print(f"\n{'variant':<48} {'ms':>8} {'W':>6} {'MHz':>6} {'TFLOP/s':>8}")
    flops = 2 * 2 * M * D * H
    for row in rows:
        scale = 1 if row["variant"] in ("eager", "pipec", "inductor (default)") or row["variant"].startswith("floor") else 2
        watts = f"{row['watts']:6.0f}" if row["watts"] else "     -"
        mhz = f"{row['sm_mhz']:6.0f}" if row["sm_mhz"] else "     -"
        print(f"{row['variant']:<48} {row['ms']:8.4f} {watts} {mhz} "
              f"{flops / scale / row['ms'] / 1e9:8.0f}")
    for name, ms in parts.items():
        print(f"{'sum of ' + name:<48} {ms:8.4f}")
    print(f"max error against fp32: {errors}")
    result = {"benchmark": "mlp_floor", "device": torch.cuda.get_device_name(),
              "versions": {"torch": torch.__version__, "triton": triton.__version__},
              "seconds": time.time() - started, "rows": rows, "sums": parts}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
