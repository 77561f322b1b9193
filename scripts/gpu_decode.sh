#!/usr/bin/env bash
# Issue 19's decoding checks on the GPU machine in one command (about 6 minutes on an H100):
#   tests   the `cudagraph` runtime's tests and tests/test_cudagraph_mix.py;
#   moves   where each generate's new static cache lands (benchmarks/decode_cache_moves.py), per
#           case and backend, each in its own process; pipec's with --who (what took each moved
#           address; the allocator's history makes those generates slower);
#   decode  benchmarks/decode.py with eager + pipec RO in one process, eager + Inductor RO in
#           another, and all three in a third (the same host for the ratio; the two backends then
#           share the caller's allocator).
# Every process starts with empty compile caches of its own. What comes back ($OUT, at most 8
# files): tests.log, moves.txt, decode.log, decode_{pipec,inductor,both}.json.
#
#   scripts/gpu_decode.sh                          # all parts, Llama and GPT-2
#   PARTS="moves decode" CASES=llama scripts/gpu_decode.sh
#
# Env: PARTS (default "tests moves decode"), CASES (decoder cases of the suite, comma-separated;
# default llama,gpt2), DEADLINE (seconds the whole command may take, install included; default 570),
# TINY=1 (the suite's tiny configs, no --who: a CPU smoke test of this script, install skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
out="${OUT:-/tmp}"
mkdir -p "$out"
cases="${CASES:-llama,gpt2}"
parts=" ${PARTS:-tests moves decode} "
export PYTHONUNBUFFERED=1 PIPEC_DISABLE_PLUGINS=broken
left() { echo $(( ${DEADLINE:-570} - ($(date +%s) - start) )); }
fresh() {  # empty compile caches for the next process
  local d; d=$(mktemp -d)
  export PIPEC_CACHE_DIR=$d/pipec PIPEC_KERNEL_DIR=$d/kernels TORCHINDUCTOR_CACHE_DIR=$d/inductor TRITON_CACHE_DIR=$d/triton
}
tiny=(); timed=(--record-parts)  # record parts time CUDA work: not in the tiny smoke test
[[ -n "${TINY:-}" ]] && tiny=(--tiny) && timed=()
if [[ -z "${TINY:-}" ]]; then
  scripts/gpu_install.sh --test-plugin >"$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
  rm -f "$out/install.log"
fi
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
if [[ $parts == *" tests "* ]]; then
  fresh
  timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider --tb=short -rs packages/runtime-cudagraph/tests \
    tests/test_cudagraph_mix.py >"$out/tests.log" 2>&1
  echo "tests rc=$?: $(tail -1 "$out/tests.log")"
  grep -E "^(FAILED|ERROR)" "$out/tests.log" | head -20
fi
if [[ $parts == *" moves "* ]]; then
  for case in ${cases//,/ }; do
    for backend in pipec-ro inductor-ro; do
      who=(); [[ $backend == pipec-ro && -z "${TINY:-}" ]] && who=(--who)
      fresh
      echo "== $case $backend ${who[*]}" >>"$out/moves.txt"
      timeout 100 python3 benchmarks/decode_cache_moves.py --case "$case" --backend "$backend" ${who[@]+"${who[@]}"} \
        ${tiny[@]+"${tiny[@]}"} \
        >>"$out/moves.txt" 2>&1
      echo "rc=$?" >>"$out/moves.txt"
    done
  done
  grep -vE "Warning|warn\(" "$out/moves.txt" | grep -E "^(==|generate|rc=)"
fi
if [[ $parts == *" decode "* ]]; then
  for row in pipec:pipec-ro inductor:inductor-ro both:pipec-ro,inductor-ro; do
    tag=${row%%:*}
    fresh
    # each of the first two runs gets a third of what is left, the last all of it
    limit=$(left); [[ $tag != both ]] && limit=$(( limit / 3 ))
    echo "== $tag (limit ${limit} s)" | tee -a "$out/decode.log"
    timeout "$limit" python3 benchmarks/decode.py --cases "$cases" --backends "eager,${row#*:}" ${timed[@]+"${timed[@]}"} ${tiny[@]+"${tiny[@]}"} \
      --out "/tmp/decode_$tag.json" >>"$out/decode.log" 2>&1
    echo "rc=$?"
    cp "/tmp/decode_$tag.json" "$out/" 2>/dev/null && grep -E "^\| " "/tmp/decode_$tag.md"
  done
fi
echo "$(( $(date +%s) - start )) s in all"
