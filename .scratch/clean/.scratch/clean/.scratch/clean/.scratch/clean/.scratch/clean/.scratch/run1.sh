set -x
cd .scratch/clean
bash scripts/gpu_install.sh > /dev/null 2>&1 || echo INSTALL FAILED
export PIPEC_DISABLE_PLUGINS=broken
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
timeout 240 python benchmarks/gemm_variants.py $OUT/gemm_variants.json > $OUT/gemm_variants.txt 2>&1
timeout 150 python benchmarks/layer_norm_variants.py $OUT/layer_norm_variants.json > $OUT/layer_norm_variants.txt 2>&1
timeout 60 python -m pytest -x -q tests/test_dynamic_shapes.py -k symbolic_views_counts 2>&1 | tail -15
