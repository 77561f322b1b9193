cd .scratch/clean
bash scripts/gpu_install.sh > /dev/null 2>&1 || echo INSTALL FAILED
export PIPEC_DISABLE_PLUGINS=broken
(cd packages/codegen-triton && timeout 200 python -m pytest -q -x tests/test_matmul_template.py 2>&1 | tail -4)
(cd tests && timeout 200 python -m pytest -q -x test_gemm_epilogue.py 2>&1 | tail -4)
cat > /tmp/bench.py <<'PY'
import logging, sys, runpy
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
logging.getLogger("pipec.tuning").setLevel(logging.INFO)
sys.argv = ["pipec"] + sys.argv[1:]
runpy.run_module("pipec", run_name="__main__")
PY
timeout 150 python /tmp/bench.py bench benchmarks/models/mlp_bf16.py -o $OUT/mlp.json > $OUT/mlp.txt 2>&1; tail -30 $OUT/mlp.txt
timeout 150 python /tmp/bench.py bench benchmarks/models/gpt2_block_bf16.py -o $OUT/gpt2.json > $OUT/gpt2.txt 2>&1; tail -25 $OUT/gpt2.txt
(cd packages/runtime-cudagraph && timeout 200 python -m pytest -q -x tests 2>&1 | tail -3)
