"""Issue 19 case: one HuggingFace transformers model of the real-model suite, random weights
built from its config (tests/real_models/hf_models.py), chosen by environment variables:

    PIPEC_HF_MODEL  a case: an architecture (bert, gpt2, llama, t5, vit, resnet, wav2vec2, ...) or
                    a named real size (gpt2-4x1024-bf16); `python tests/real_models/hf_models.py` lists them;
                    or a diffusion model of diffusers_models.py (sd15_unet, sdxl_unet, flux, ...)
    PIPEC_HF_SIZE   real (default: the published base config, on the GPU) or tiny (the CI config)

    PIPEC_HF_MODEL=bert pipec bench benchmarks/models/hf_model.py --inductor-mode reduce-overhead \\
        --pipec-mode reduce-overhead
    PIPEC_HF_MODEL=gpt2 PIPEC_HF_SIZE=tiny pipec bench benchmarks/models/hf_model.py --device cpu
    python benchmarks/real_models.py --out results.json      # every case, one table

The model returns plain tensors (logits, last_hidden_state); decoders run with their KV cache
on, as transformers does by default.
"""

import os
import sys

from bench_inputs import class_from, default_device

CASE = os.environ.get("PIPEC_HF_MODEL", "")
SIZE = os.environ.get("PIPEC_HF_SIZE", "real")
if not CASE:
    raise ValueError("set PIPEC_HF_MODEL to a case of tests/real_models/hf_models.py (e.g. bert)")

try:
    _built = class_from("tests/real_models/hf_models.py", "pipec_bench_hf_models", "build")(
        CASE, SIZE, device=default_device())
except KeyError as unknown:  # not a transformers case: a diffusion model (diffusers_models.py)?
    _build = class_from("tests/real_models/diffusers_models.py", "pipec_bench_diffusers_models", "build")
    known = sys.modules["pipec_bench_diffusers_models"].BY_NAME
    if CASE not in known:
        raise KeyError(f"{unknown.args[0]}; diffusion models: {', '.join(known)}") from None
    _built = _build(CASE, SIZE, device=default_device())
model = _built.model
example_inputs = _built.inputs
if _built.tolerance is not None:
    tolerance = _built.tolerance
