#!/usr/bin/env bash
# Install pipec's packages into the GPU machine's preinstalled Python (torch, triton,
# typer, rich, pluggy, sympy, networkx, safetensors are there; it has no network).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-build-isolation \
  ./packages/ir ./packages/capture ./packages/fusion ./packages/codegen-triton \
  ./packages/runtime-cudagraph ./packages/cli ./tests/plugin_pkg
