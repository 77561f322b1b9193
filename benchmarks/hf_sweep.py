"""Issue 19's breadth check: transformers architectures beyond the real-model suite
(tests/real_models/hf_models.py), each built tiny from its config (random weights, fp32, CPU,
2 x 8 tokens or 32 x 32 images), run eagerly and through pipec, outputs compared at 1e-4.

    python benchmarks/hf_sweep.py NAME                # torch.compile(model, backend="pipec") vs eager
    python benchmarks/hf_sweep.py NAME --strict       # pipec.compile(model, eager_fallback=False): a graph
                                                      # that fails raises (the traceback behind a fallback)
    python benchmarks/hf_sweep.py NAME --eager-only   # only build the model and run it eagerly
    python benchmarks/hf_sweep.py NAME --device cuda  # the same on a GPU: compiled Triton kernels, not the interpreter
    python benchmarks/hf_sweep.py NAME --train        # a training step: outputs and every parameter's gradient
    python benchmarks/hf_sweep.py NAME --train --checkpointing   # with gradient checkpointing on, both sides
    python benchmarks/hf_sweep.py --list              # the architectures (--list-extra: the second batch)
    python benchmarks/hf_sweep.py --list-third        # the third batch (session 31)
    python benchmarks/hf_sweep.py --list-fourth       # the fourth batch (session 46)
    python benchmarks/hf_sweep.py --list-fifth        # the fifth batch (session 46: vision, detection, audio, time series)
    python benchmarks/hf_sweep.py --list-sixth        # the sixth batch (session 49: causal LMs new in transformers 5.x)
    for a in $(python benchmarks/hf_sweep.py --list); do timeout 240 python benchmarks/hf_sweep.py $a; done

Prints one JSON line per run: status (ok / mismatch / error / build-failed: the model itself
could not be built or run eagerly; where compiled and eager differ, both are compared with eager
in float64: ok-vs-float64 when the compiled values are as close to those as eager's, and
ill-conditioned when eager's own fp32 misses them too), the max error, the exception and its
deepest pipec frame, pipec's warnings (fallbacks, extern calls), graph breaks and the seconds of
compile and first call. One process per architecture keeps one failure from poisoning the next.
Session 15's run: benchmarks/results/hf_sweep_cpu_s15.md; session 16's, inference and training:
benchmarks/results/hf_sweep_cpu_s16.jsonl, hf_sweep_train_cpu_s16.jsonl. The architectures and
their inputs: hf_sweep_archs.py (the fourth and fifth batches in hf_sweep_later_archs.py, the sixth in
hf_sweep_sixth.py, the shared tiny configs in hf_sweep_configs.py) and hf_sweep_inputs.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import copy
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
import warnings

import numpy as np
import torch

from hf_sweep_archs import ARCHS, EXTRA, FIFTH, FOURTH, REINIT, SIXTH, THIRD
from hf_sweep_inputs import make_inputs

# the batches after the first, each listed by --list-NAME; --list lists the first batch (the rest)
LATER_BATCHES = {"extra": EXTRA, "third": THIRD, "fourth": FOURTH, "fifth": FIFTH, "sixth": SIXTH}

PKG_ROOT = str(Path(__file__).resolve().parents[1] / "packages") + "/"  # pipec's frames in tracebacks


def tensors_of(out, prefix="out"):
    """Every tensor in a model output (ModelOutput / tuple / dict), by path; caches skipped."""
    found = {}
    if isinstance(out, torch.Tensor):
        found[prefix] = out
    elif isinstance(out, dict):  # ModelOutput is an OrderedDict
        for k, v in out.items():
            if k in ("past_key_values",):
                continue
            found.update(tensors_of(v, f"{prefix}.{k}"))
    elif isinstance(out, (tuple, list)):
        for i, v in enumerate(out):
            found.update(tensors_of(v, f"{prefix}[{i}]"))
    return found


def frames_of(exc, n=15):
    """The last n frames of the innermost exception (following Dynamo's inner_exception, __cause__, __context__)."""
    chain, seen, e = [], set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        inner = getattr(e, "inner_exception", None)
        e = inner if isinstance(inner, BaseException) else (e.__cause__ or e.__context__)
    root = chain[-1]
    # the frames of every exception of the chain, outermost first: together the path to the root
    frames = [f"{f.filename}:{f.lineno} {f.name}" for e in chain for f in traceback.extract_tb(e.__traceback__)]
    pipec = [f for f in frames if f.startswith(PKG_ROOT)]
    return root, frames[-n:], (pipec[-1] if pipec else None)


class StderrCapture:
    """fd-level capture of stderr (Python's sys.stderr and anything native)."""

    def __enter__(self):
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile(mode="w+b")
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *a):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        self.text = self.file.read().decode("utf-8", "replace")
        self.file.close()


def dedup(lines, limit=40):
    out = []
    for line in lines:
        line = line.strip()[:200]
        if line and line not in out:
            out.append(line)
    return out[:limit]


def build(name):
    import transformers
    cfg_cls, kwargs, model_cls, kind = ARCHS[name]
    config = getattr(transformers, cfg_cls)(**kwargs)
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).eval()
    if name in REINIT:  # their default init makes the activations vanish (logits 0 / 1e-9): fan-in init
        with torch.no_grad():
            for p in model.parameters():
                if p.ndim >= 2:
                    p.normal_(0, p[0].numel() ** -0.5)
            for mod in model.modules():
                if isinstance(mod, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm)):
                    if mod.weight is not None:
                        mod.weight.normal_(1, 0.1)
                        mod.bias.normal_(0, 0.1)
    inputs = make_inputs(kind, config, torch.Generator().manual_seed(1))
    return model, inputs, model_cls


def make_step(model, inputs, train: bool, spec_augment: bool = False):
    """`step(fn) -> {name: tensor}`: the outputs of `fn(**inputs)`, and with `train` the gradient
    of every parameter after a backward of a fixed weighted sum of the float outputs (the same
    weights for every backend: drawn from one seed, in the outputs' order). With `spec_augment`
    a speech model keeps its SpecAugment masks, drawn from numpy's generator seeded before each
    step (main has Dynamo draw traced numpy randomness from numpy too), so every backend masks alike."""
    if not train:
        def infer(fn):
            with torch.no_grad():
                return tensors_of(fn(**inputs))
        return infer
    for module in model.modules():  # random masks no two backends draw alike: dropout, and
        if isinstance(module, torch.nn.Dropout):  # stochastic depth (transformers' DropPath classes)
            module.p = 0.0
        if isinstance(getattr(module, "drop_prob", None), float):
            module.drop_prob = 0.0
    masks = () if spec_augment else ("mask_time_prob", "mask_feature_prob")  # speech models' SpecAugment
    for name in (*masks, "layerdrop"):
        if isinstance(getattr(model.config, name, None), float):
            setattr(model.config, name, 0.0)
    model.train()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def train_step(fn):
        np.random.seed(0)  # SpecAugment's masks (`_compute_mask_indices` draws them with numpy)
        for _, p in params:
            p.grad = None
        out = tensors_of(fn(**inputs))
        g = torch.Generator().manual_seed(7)
        loss = sum((t * torch.randn(t.shape, generator=g).to(t)).sum()
                   for t in out.values() if t.is_floating_point() and t.requires_grad)
        loss.backward()
        grads = {f"grad.{n}": p.grad.detach().clone() for n, p in params if p.grad is not None}
        return {**{k: v.detach() for k, v in out.items()}, **grads}
    return train_step


def parse_args(argv):
    import argparse
    ap = argparse.ArgumentParser(description="Compile one transformers architecture, built tiny, and compare it "
                                             "with eager (one JSON line).")
    ap.add_argument("arch", nargs="?", help="the architecture (see --list)")
    ap.add_argument("--list", action="store_true", help="the first batch of architectures")
    for name, ordinal in zip(LATER_BATCHES, ("second", "third", "fourth", "fifth", "sixth")):
        ap.add_argument(f"--list-{name}", action="store_true", help=f"the {ordinal} batch")
    ap.add_argument("--strict", action="store_true",
                    help="pipec.compile(model, eager_fallback=False): a graph that fails raises")
    ap.add_argument("--backend", default="pipec", help="torch.compile backend (default pipec)")
    ap.add_argument("--eager-only", action="store_true", help="only build the model and run it eagerly")
    ap.add_argument("--train", action="store_true",
                    help="a training step instead: the model in train mode (dropout off), a fixed weighted sum "
                         "of its float outputs as the loss, every parameter's gradient compared too")
    ap.add_argument("--spec-augment", action="store_true",
                    help="with --train: speech models keep their SpecAugment masks (off otherwise), the same "
                         "masks for every backend (numpy's generator, seeded before each step)")
    ap.add_argument("--checkpointing", action="store_true",
                    help="with --train: gradient checkpointing on (transformers' gradient_checkpointing_enable(), "
                         "eager and compiled alike); status no-checkpointing where the model has none")
    ap.add_argument("--device", default="cpu",
                    help="cpu (default: Triton's interpreter) or cuda (compiled kernels, fp32 as on the CPU)")
    args = ap.parse_args(argv)
    args.batch = next((name for name in LATER_BATCHES if getattr(args, f"list_{name}")), None)
    if args.arch is None and args.batch is None:
        args.list = True
    if args.checkpointing and not args.train:
        ap.error("--checkpointing needs --train")
    if args.arch is not None and args.arch not in ARCHS:
        later = ", ".join(f"--list-{name}" for name in LATER_BATCHES)
        ap.error(f"unknown architecture {args.arch!r} (see --list and {later})")
    return args


def main():
    args = parse_args(sys.argv[1:])
    if args.list:
        print("\n".join(a for a in ARCHS if not any(a in batch for batch in LATER_BATCHES.values())))
        return
    if args.batch is not None:
        print("\n".join(LATER_BATCHES[args.batch]))
        return
    name, strict, backend, eager_only = args.arch, args.strict, args.backend, args.eager_only
    device = torch.device(args.device)
    if device.type == "cuda":  # fp32 means fp32 on both sides: no TF32 in eager's matmuls or convolutions
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    mode = "strict" if strict else ("torch.compile" if backend == "pipec" else f"torch.compile backend={backend}")
    mode += " train" if args.train else ""
    mode += " checkpointing" if args.checkpointing else ""
    if args.spec_augment:
        mode += " spec-augment"
        # Dynamo otherwise traces np.random as torch's generator: masks unlike eager's
        torch._dynamo.config.use_numpy_random_stream = True
    rec = {"arch": name, "mode": mode, "device": device.type, "status": None, "max_abs_err": None,
           "exc_type": None, "exc_msg": None, "traceback": None, "deepest_pipec_frame": None,
           "warnings": [], "stderr": [], "seconds": None, "graph_breaks": None, "unique_graphs": None}

    def emit():
        print(json.dumps(rec), flush=True)

    # ---- build + eager
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            model, inputs, model_cls = build(name)
            model = model.to(device)
            inputs = {k: v.to(device) for k, v in inputs.items()}
            reference_model = copy.deepcopy(model)  # for the float64 verdict (the step below changes it)
            rec["model_class"] = model_cls
            if args.checkpointing:
                if not getattr(model, "supports_gradient_checkpointing", False):
                    rec["status"] = "no-checkpointing"
                    emit()
                    return
                model.gradient_checkpointing_enable()
            step = make_step(model, inputs, args.train, args.spec_augment)
            expected = step(model)
    except Exception as exc:  # noqa: BLE001
        rec["status"] = "build-failed"
        rec["exc_type"] = type(exc).__name__
        rec["exc_msg"] = str(exc)[:400]
        rec["traceback"] = frames_of(exc)[1]
        emit()
        return
    rec["outputs"] = {k: list(v.shape) for k, v in expected.items()}
    rec["output_max_abs"] = {k: float(v.abs().max()) for k, v in expected.items() if v.is_floating_point() and v.numel()}
    if eager_only:
        rec["status"] = "eager-ok"
        emit()
        return

    # ---- compile + first call
    from torch._dynamo.utils import counters
    if strict:
        import pipec
    got = None
    t0 = time.perf_counter()
    try:
        with StderrCapture() as cap, warnings.catch_warnings(record=True) as wlist:
            warnings.simplefilter("always")
            try:
                # a training step's random ops (PhiMoE's router noise) are left to torch's generator, so
                # its draws are eager's: compared exactly, not as two different samples
                options = {"fallback_random": True} if args.train and backend == "pipec" else {}
                if strict:
                    compiled = pipec.compile(model, eager_fallback=False, **options)
                else:
                    compiled = torch.compile(model, backend=backend, **({"options": options} if options else {}))
                got = step(compiled)
            except Exception as exc:  # noqa: BLE001
                err = exc
            else:
                err = None
    finally:
        rec["seconds"] = round(time.perf_counter() - t0, 1)
    rec["warnings"] = dedup(f"{w.category.__name__}: {w.message}" for w in wlist)
    rec["stderr"] = dedup(cap.text.splitlines())
    rec["graph_breaks"] = sum(counters["graph_break"].values())
    rec["graph_break_reasons"] = dedup(counters["graph_break"].keys(), 10)
    rec["unique_graphs"] = counters["stats"].get("unique_graphs")
    rec["fallback"] = any("could not be compiled and runs eagerly" in w for w in rec["warnings"] + rec["stderr"])
    rec["extern_calls"] = [w for w in rec["warnings"] if "extern call" in w]

    if err is not None:
        root, frames, deepest = frames_of(err)
        rec["status"] = "error"
        rec["exc_type"] = type(err).__name__
        rec["exc_msg"] = str(err)[:400]
        rec["root_exc_type"] = type(root).__name__
        rec["root_exc_msg"] = str(root)[:400]
        rec["traceback"] = frames
        rec["deepest_pipec_frame"] = deepest
        emit()
        return

    # ---- compare
    errs = {}
    mismatch = []
    if set(got) != set(expected):
        mismatch.append(f"output keys differ: eager {sorted(expected)} compiled {sorted(got)}")
    for k in expected:
        if k not in got:
            continue
        e, c = expected[k], got[k]
        if e.shape != c.shape:
            mismatch.append(f"{k}: shape {list(c.shape)} != {list(e.shape)}")
            continue
        if e.is_floating_point():
            errs[k] = float((c.double() - e.double()).abs().nan_to_num(float("inf")).max()) if e.numel() else 0.0
        try:
            # gradients sum over a batch and a weighted loss: relative 1e-3
            torch.testing.assert_close(c, e, atol=1e-4, rtol=1e-3 if k.startswith("grad.") else 1e-4)
        except AssertionError as ae:
            mismatch.append(f"{k}: {' '.join(str(ae).split())[:300]}")
    rec["max_abs_err"] = max(errs.values()) if errs else 0.0
    rec["per_output_err"] = errs
    if mismatch and not any("shape" in m or "keys" in m for m in mismatch):
        rec["vs_float64"] = float64_verdict(reference_model, inputs, args.train, expected, got)
    if not mismatch:
        rec["status"] = "ok"
    elif rec.get("vs_float64", {}).get("within"):
        # as close to the exact values as eager is; where eager's own fp32 misses them, no verdict
        rec["status"] = "ill-conditioned" if rec["vs_float64"]["ill_conditioned_count"] else "ok-vs-float64"
        rec["exc_msg"] = "; ".join(mismatch)[:400]
    else:
        rec["status"] = "mismatch"
        rec["exc_msg"] = "; ".join(mismatch)[:400]
    emit()


def float64_verdict(model, inputs, train: bool, expected: dict, got: dict) -> dict:
    """Where compiled and eager differ beyond tolerance, both against eager in float64 (the model
    and its float inputs in float64, the same step). A value passes when its compiled error is at
    most twice eager's own (plus 1e-5 and 1e-4 of its magnitude), or when eager's fp32 is itself
    outside the tolerance against the exact values: then the model amplifies fp32 rounding on its
    own and no fp32 backend can match eager (MobileNetV2 trained at batch 2: batch norm over two
    samples at 1 x 1 pixels; eager's gradients are 10% off there). Such values are listed as
    `ill_conditioned`; `within` when every value passes."""
    try:
        exact = make_step(model.double(), {k: v.double() if v.is_floating_point() else v
                                          for k, v in inputs.items()}, train)(model)
    except Exception as exc:  # noqa: BLE001 - a model that cannot run in float64: no verdict
        return {"within": False, "error": f"{type(exc).__name__}: {exc}"[:200]}
    failing, ill = {}, []
    for k, ref in exact.items():
        if k not in expected or k not in got or not ref.is_floating_point() or not ref.numel():
            continue
        eager = float((expected[k].double() - ref).abs().max())
        compiled = float((got[k].double() - ref).abs().max())
        rtol = 1e-3 if k.startswith("grad.") else 1e-4
        if not torch.allclose(expected[k].double(), ref, atol=1e-4, rtol=rtol):
            ill.append(k)
        elif compiled > 2 * eager + 1e-5 + 1e-4 * float(ref.abs().max()):
            failing[k] = (compiled, eager)
    worst = max(failing, key=lambda k: failing[k][0] - failing[k][1], default=None)
    return {"within": not failing, "worst": worst, "compiled_err": failing.get(worst, (None,))[0],
            "eager_err": failing.get(worst, (None, None))[1], "ill_conditioned": ill[:10],
            "ill_conditioned_count": len(ill)}


if __name__ == "__main__":
    main()
