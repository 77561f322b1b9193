cd .scratch/clean
bash scripts/gpu_install.sh > /dev/null 2>&1 || echo INSTALL FAILED
export PIPEC_DISABLE_PLUGINS=broken
cat > /tmp/suite.py <<'PY'
import logging, sys, runpy
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
logging.getLogger("pipec.tuning").setLevel(logging.INFO)
sys.argv = ["suite.py"] + sys.argv[1:]
runpy.run_path("benchmarks/suite.py", run_name="__main__")
PY
timeout 420 python /tmp/suite.py --max-autotune --cases mlp_bf16,gpt2_block_bf16 --out $OUT/suite.json > $OUT/suite.txt 2>&1
grep -v "^pipec.tuning: pipec_fused_cast\|_epilogue:" $OUT/suite.txt | tail -45
