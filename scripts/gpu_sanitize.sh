#!/usr/bin/env bash
# A bounds-checked GPU run, one command on the GPU machine (a few minutes):
#   scripts/gpu_sanitize.sh            summary in ${OUT:-/tmp}/sanitize/summary.txt (logs beside it)
# Runs a set of GPU tests and a short fuzz run (scripts/fuzz.py --device cuda) under
# `compute-sanitizer --tool memcheck` when it works on this machine (on gVisor it refuses the
# device), else with pipec's bounds-checked kernels (PIPEC_BOUNDS_CHECK=1: every load and store
# asserts its range, tests/test_bounds_check.py). Installs pipec first when python3 lacks it.
#   TESTS="..."       test files to run (default: the GPU-heavy ones below)
#   FUZZ_COUNT=N      fuzzed graphs (default 60), FUZZ_SEED=S (default 7)
#   OPINFO=1          also the OpInfo sweep's bf16 GPU half, one sample per entry (longer; needs
#                     expecttest: a wheel in .whl/, see the GPU machine's README on carrying wheels)
#   MODE=memcheck|bounds_check   skip the probe
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp}/sanitize"
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
export PIPEC_DISABLE_PLUGINS=broken PYTHONUNBUFFERED=1
note() { echo "$*" | tee -a "$summary"; }

python3 -c "import pipec" 2>/dev/null || scripts/gpu_install.sh --test-plugin >"$out/install.log" 2>&1 || { note "install failed: $out/install.log"; exit 1; }
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" \
  | tee -a "$summary"

mode="${MODE:-}"
if [ -z "$mode" ]; then
  mode=bounds_check
  if command -v compute-sanitizer >/dev/null 2>&1; then
    # a planted out-of-bounds write must be reported, and a clean run must pass
    probe='import torch, triton, triton.language as tl
@triton.jit
def k(p, n, B: tl.constexpr):
    o = tl.arange(0, B)
    tl.store(p + o, o.to(tl.float32), mask=o < n)
x = torch.empty(64, device="cuda")
k[(1,)](x, int(__import__("sys").argv[1]), B=128)
torch.cuda.synchronize()'
    if timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 python3 -c "$probe" 64 >"$out/probe-clean.log" 2>&1 \
       && ! PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 \
            python3 -c "$probe" 128 >"$out/probe-oob.log" 2>&1 \
       && grep -q "Invalid __global__ write" "$out/probe-oob.log"; then
      mode=memcheck
    else
      note "compute-sanitizer is here but does not work on this machine (probe logs in $out): bounds-checked kernels instead"
    fi
  else
    note "no compute-sanitizer on this machine: bounds-checked kernels instead"
  fi
fi
note "mode: $mode"

TESTS="${TESTS:-tests/test_bounds_check.py tests/test_gemm_epilogue.py tests/test_scan_ops.py tests/test_scatter_ops.py \
tests/test_view_chains.py tests/test_random_ops.py tests/test_sort_ops.py packages/capture/tests/test_gpu.py \
packages/runtime-cudagraph/tests/test_runtime_launch.py}"

run_part() {  # name, seconds, command...: run it the mode's way; one summary line
  local name=$1 limit=$2; shift 2
  local log="$out/$name.log" start=$SECONDS rc
  if [ "$mode" = memcheck ]; then
    # no caching allocator: each tensor its own allocation, so a read past one is seen
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "$limit" compute-sanitizer --tool memcheck --target-processes all \
      --error-exitcode 99 --print-limit 100 --log-file "$out/$name.memcheck.%p.log" "$@" >"$log" 2>&1
  else
    PIPEC_BOUNDS_CHECK=1 timeout "$limit" "$@" >"$log" 2>&1
  fi
  rc=$?
  local what
  what=$(grep -E "^[0-9]+ (passed|failed)|passed|failed|fuzz:|opinfo sweep" "$log" | tail -1)
  note "$name: rc=$rc ($((SECONDS - start)) s) ${what:-no result line}$([ $rc = 124 ] && echo ' TIMED OUT')"
  if [ "$mode" = memcheck ]; then
    local errors
    errors=$(cat "$out/$name".memcheck.*.log 2>/dev/null | grep -h "ERROR SUMMARY" | grep -v " 0 errors" | sort | uniq -c)
    note "  memcheck: ${errors:-0 errors in every process}"
    cat "$out/$name".memcheck.*.log 2>/dev/null | grep -h -A3 "Invalid __global__\|Out-of-range\|Misaligned" | head -20 >>"$summary"
  fi
  local oob
  oob=$(grep -c "out of bounds" "$log")
  [ "$oob" != 0 ] && { note "  $oob lines name an out-of-bounds access:"; grep -m 10 "out of bounds" "$log" >>"$summary"; }
  grep -q "device-side assert" "$log" && note "  a device-side assertion failed (see $log)"
  return 0
}

# the test that trips an assertion on purpose runs only where assertions are the check
deselect=()
[ "$mode" = memcheck ] && deselect=(-k "not device_assert")
# shellcheck disable=SC2086
run_part tests "${TEST_SECONDS:-150}" python3 -m pytest -q -n "${JOBS:-4}" -p no:cacheprovider --tb=short $TESTS "${deselect[@]}"
fuzz_flag=--bounds-check
[ "$mode" = memcheck ] && fuzz_flag=--no-bounds-check
run_part fuzz "${FUZZ_SECONDS:-110}" python3 scripts/fuzz.py --device cuda --count "${FUZZ_COUNT:-60}" \
  --seed "${FUZZ_SEED:-7}" "$fuzz_flag" --last-program "$out/fuzz-last-program.txt" --summary "$out/fuzz.json"
if [ "${OPINFO:-0}" = 1 ]; then
  # torch's op_db imports expecttest, which the GPU machine lacks: a wheel in .whl/ (git-excluded,
  # carried with the call) is installed aside; without one the sweep is skipped with a line saying so
  if ! python3 -c "import expecttest" 2>/dev/null && ls .whl/expecttest-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pipec-site .whl/expecttest-*.whl \
      && export PYTHONPATH="/tmp/pipec-site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  if python3 -c "import expecttest" 2>/dev/null; then
    run_part opinfo "${OPINFO_SECONDS:-600}" python3 scripts/opinfo_sweep.py --device cuda --dtype bfloat16 \
      --max-samples 1 --jobs "${JOBS:-4}" --out "$out/opinfo.json"
  else
    note "opinfo: skipped: torch's op_db needs expecttest (pip download it into .whl/ and carry .whl)"
  fi
fi
note "summary: $summary"
