"""A compiled optimizer step: `compile(optimizer.step)` on a real model's parameters, against eager
and TorchInductor in the same process (GPU).

    python benchmarks/optimizer_step.py --backends eager,pipec,pipec-ro,inductor,inductor-ro --out opt.json

The parameters are BERT base's (201 tensors, 110M values; `transformers.BertForMaskedLM` with its
default config, fp32) with fixed random gradients. Per backend: the first call's wall time (the
compile), the step's time (`triton.testing.do_bench`, ms), and a check that three steps leave the
parameters where eager's three steps do (assert_close at fp32 tolerance). `-ro` compiles with
mode="reduce-overhead" (CUDA Graph replays); `pipec-nocombo` is pipec with `combo_kernels=False`
(a launch per parameter's update). pipec runs with its fallback warnings as errors: a
step that ran anything eagerly is reported as such, not timed.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
import warnings

import torch

STEPS_CHECKED = 3


def make_step(backend: str, optimizer):
    if backend == "eager":
        return optimizer.step
    if backend.startswith("inductor"):
        return torch.compile(optimizer.step, mode="reduce-overhead" if backend.endswith("-ro") else None)
    import pipec
    extra = {"combo_kernels": False} if backend == "pipec-nocombo" else {}
    return pipec.compile(optimizer.step, mode="reduce-overhead" if backend.endswith("-ro") else "default", **extra)


def run(backend: str, base: torch.nn.Module, grads: list, name: str, foreach: bool, reference: list | None) -> dict:
    from triton.testing import do_bench

    torch._dynamo.reset()
    model = copy.deepcopy(base)
    optimizer = getattr(torch.optim, name)(model.parameters(), lr=1e-3, foreach=foreach)
    for p, g in zip(model.parameters(), grads):
        p.grad = g.clone()
    step = make_step(backend, optimizer)
    with warnings.catch_warnings():
        if backend.startswith("pipec"):
            from pipec.errors import PipecFallbackWarning
            warnings.simplefilter("error", PipecFallbackWarning)
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        first = time.perf_counter() - start
        for _ in range(STEPS_CHECKED - 1):
            step()
    params = [p.detach().clone() for p in model.parameters()]
    if reference is not None:
        torch.testing.assert_close(params, reference, rtol=1e-5, atol=1e-6)
    ms = do_bench(step, warmup=25, rep=200)
    row = {"first_call_s": round(first, 2), "step_ms": round(ms, 4), "params": params}
    session = getattr(step, "pipec_session", None)
    if session is not None:  # kernels launched per step, as the compile counted them
        row["kernels"] = session.kernel_count
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="eager,pipec,pipec-ro,inductor,inductor-ro")
    ap.add_argument("--optimizer", default="AdamW", help="a torch.optim class (default AdamW)")
    ap.add_argument("--no-foreach", action="store_true", help="the single-tensor implementation")
    ap.add_argument("--out", help="JSON file")
    args = ap.parse_args()
    import transformers

    torch.manual_seed(0)
    base = transformers.BertForMaskedLM(transformers.BertConfig()).cuda()
    gen = torch.Generator(device="cuda").manual_seed(2)
    grads = [torch.randn(p.shape, generator=gen, device="cuda") * 1e-2 for p in base.parameters()]
    foreach = not args.no_foreach
    rows, reference = {}, None
    for backend in ["eager"] + [b for b in args.backends.split(",") if b != "eager"]:
        try:
            row = run(backend, base, grads, args.optimizer, foreach, reference)
        except Exception as e:  # noqa: BLE001 - one backend's failure is a row, not the end of the run
            rows[backend] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            print(f"{backend}: {rows[backend]['error']}", flush=True)
            continue
        params = row.pop("params")
        if reference is None:
            reference = params
        rows[backend] = row
        print(f"{backend}: first call {row['first_call_s']} s, step {row['step_ms']} ms", flush=True)
    eager_ms = rows["eager"]["step_ms"]
    for backend, row in rows.items():
        if "step_ms" in row:
            row["speedup_vs_eager"] = round(eager_ms / row["step_ms"], 2)
            for other in ("inductor", "inductor-ro"):
                if backend.startswith("pipec") and "step_ms" in rows.get(other, {}):
                    row[f"speedup_vs_{other}"] = round(rows[other]["step_ms"] / row["step_ms"], 2)
    result = {"optimizer": args.optimizer, "foreach": foreach, "model": "bert-base (201 tensors)",
              "device": torch.cuda.get_device_name(), "torch": torch.__version__, "backends": rows}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
