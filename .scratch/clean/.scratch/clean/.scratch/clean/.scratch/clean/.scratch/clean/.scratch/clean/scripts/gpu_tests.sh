#!/usr/bin/env bash
# Every test folder on the GPU machine, one pytest per folder (test basenames repeat
# across folders); logs under ${OUT:-/tmp}/tests-*.log, one summary line per folder.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}"
export PIPEC_DISABLE_PLUGINS=broken
for d in packages/ir/tests packages/capture/tests packages/fusion/tests packages/codegen-triton/tests \
         packages/runtime-cudagraph/tests packages/cli/tests tests; do
  log="$out/tests-$(echo "$d" | tr / _).log"
  timeout "${PER_FOLDER_TIMEOUT:-300}" python3 -m pytest -q -n "${JOBS:-16}" -p no:cacheprovider --tb=short "$d" >"$log" 2>&1
  echo "$d rc=$? $(tail -1 "$log")"
done
