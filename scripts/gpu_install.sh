#!/usr/bin/env bash
# Install pipec's packages into the GPU machine's preinstalled Python (torch, triton,
# typer, rich, pluggy, sympy, networkx, safetensors are there; it has no network).
#
#   scripts/gpu_install.sh                 # what a user has: pipec's packages only (benchmarks)
#   scripts/gpu_install.sh --test-plugin   # + tests/plugin_pkg, for GPU test runs of the plugin tests
#
# The test plugin wraps the `launch` runtime (its `watch` entry point), so a benchmark run with it
# installed would measure pipec through a wrapper no user has.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=()
if [[ "${1:-}" == "--test-plugin" ]]; then
  extra=(./tests/plugin_pkg)
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation \
  ./packages/ir ./packages/capture ./packages/fusion ./packages/codegen-triton \
  ./packages/runtime-cudagraph ./packages/cli ${extra[@]+"${extra[@]}"}
