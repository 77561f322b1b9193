#!/usr/bin/env bash
# Create .venv and install pipec's packages into it (editable), with a CPU build of torch.
#   scripts/install.sh          pipec and its stages
#   scripts/install.sh --dev    plus test tooling (nox, pytest, ruff, hypothesis), the redis client
#                               (for the `redis` compile cache and its tests), the example plugin and
#                               HuggingFace transformers and diffusers (the real-model suite, tests/real_models; never
#                               a dependency of pipec itself)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip
# Pin torch first: an unpinned torch would pull a multi-GB CUDA build.
pip install -q "torch==${PIPEC_TORCH_VERSION:-2.13.0}"
pip install -q -e packages/ir -e packages/capture -e packages/fusion -e packages/codegen-triton \
    -e packages/runtime-cudagraph -e packages/cli
if [ "${1:-}" = "--dev" ]; then
    pip install -q nox pytest pytest-xdist ruff hypothesis jsonschema redis expecttest transformers==5.23.0 \
        diffusers==0.42.1
    pip install -q ./tests/plugin_pkg
fi
echo "pipec installed in .venv ($(.venv/bin/python -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'))"
