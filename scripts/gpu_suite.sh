#!/usr/bin/env bash
# One GPU command's share of issue 19's real-model suite: install pipec (scripts/gpu_install.sh),
# then run the cases expected to finish inside the command's time, leaving out those that earlier
# parts finished. The device allows 10 minutes a command and the suite takes about 20, so a lease
# runs it in parts and `real_models.py --combine` makes one table of them here:
#
#   PART=a scripts/gpu_suite.sh                  # first command: $OUT/real_models_a.json and .md
#   (copy a's JSON back into the checkout, e.g. under benchmarks/results/parts/, untracked: it travels)
#   PART=b DONE="benchmarks/results/parts/real_models_a.json" scripts/gpu_suite.sh
#   python benchmarks/real_models.py --out all.json --combine real_models_a.json real_models_b.json
#
# Env: PART (the results' tag; default a), DEADLINE (seconds the whole command may take, install
# included; default 560), DONE (earlier parts' results, space-separated), CASES (comma-separated;
# default every real case), EXPECT (results whose case seconds predict this run's; default the
# committed H100 runs, the latest winning), EXTRA (more real_models.py arguments, e.g.
# "--pipec-option grouped_matmuls=true").
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
out="${OUT:-/tmp}"
mkdir -p "$out"
part="${PART:-a}"
export PYTHONUNBUFFERED=1
scripts/gpu_install.sh >"$out/install_$part.log" 2>&1 || { tail -20 "$out/install_$part.log"; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm,temperature.gpu --format=csv,noheader 2>/dev/null
expect=${EXPECT:-benchmarks/results/real_models_h100_s41.json benchmarks/results/real_models_h100_s42_b.json \
benchmarks/results/real_models_h100_s43.json benchmarks/results/real_models_h100_s44.json \
benchmarks/results/real_models_h100_s45.json benchmarks/results/real_models_h100_s46.json benchmarks/results/real_models_h100_s47.json \
benchmarks/results/real_models_h100_s48.json benchmarks/results/real_models_h100_s49.json}
args=(--out "$out/real_models_$part.json" --deadline $(( ${DEADLINE:-560} - ($(date +%s) - start) )) --expect $expect)
[ -n "${DONE:-}" ] && args+=(--skip-done $DONE)
[ -n "${CASES:-}" ] && args+=(--cases "$CASES")
# shellcheck disable=SC2086  # EXTRA is a list of arguments
python3 benchmarks/real_models.py "${args[@]}" --rounds 2 --budget 240 ${EXTRA:-} > "$out/real_models_$part.log" 2>&1
cut -d"|" -f2,6-15 "$out/real_models_$part.md" 2>/dev/null; grep -E "cases ok|Not started" "$out/real_models_$part.md" 2>/dev/null || tail -20 "$out/real_models_$part.log"
echo "part $part: $(( $(date +%s) - start )) s in all"
