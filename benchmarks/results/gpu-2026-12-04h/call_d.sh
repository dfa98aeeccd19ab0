# Fourth call: min_direct_saving_ms (selection._pays_its_host) — the selection tests on the GPU; GPT-2-medium with
# min_speedup 1.0 (call_c fused its fc GEMM, saving 0.0097 ms, and ran 0.78x: now declined by the saving rule);
# the LN tower's first compile A/B (fold kernel / torch-ops fold), two processes each, alternating.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 100 python -m pytest tests/test_direct_launch.py tests/test_selection.py tests/test_quack_backend.py -q \
  -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
echo "== selection tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/gpu_tests.log | cut -c1-200
grep -h "^FAILED\|^ERROR" $OUT/gpu_tests.log | head -10 | cut -c1-300
cd /tmp/site/benchmarks
HOME=/tmp/home_dg TORCHINDUCTOR_CACHE_DIR=/tmp/ind_dg TRITON_CACHE_DIR=/tmp/tri_dg \
  timeout 120 python blocks.py --blocks gpt2_medium_layer --modes inference --rounds 3 \
  --warm-process --host --random-embeds --backends default norm_fusion --gemm-backends triton --min-speedup 1.0 \
  --plugin-option measure_budget_s=30 > $OUT/gpt2.log 2>&1
echo "== gpt2 (rc $?, ${SECONDS} s)"
grep -h "^| gpt2\|compile s\|of it\|host ms" $OUT/gpt2.log | cut -c1-250
grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/gpt2.log | grep -o "regrouped_norm (.*" | cut -c1-120
grep -ho "saves [0-9.]* ms per call, under min_direct_saving_ms=[0-9.]*" $OUT/gpt2.log
for run in kernel1 torch1 kernel2 torch2; do
  left=$((560 - SECONDS)); [ $left -lt 45 ] && break
  driver=blocks.py; [ ${run#torch} != $run ] && driver=results/gpu-2026-12-04h/fold_torch_ops.py
  HOME=/tmp/home_d$run TORCHINDUCTOR_CACHE_DIR=/tmp/ind_d$run TRITON_CACHE_DIR=/tmp/tri_d$run \
    timeout 80 python $driver --blocks recsys_ln_tower --modes inference --rounds 1 \
    --warm-process --random-embeds --backends default norm_fusion --gemm-backends triton > $OUT/ln_$run.log 2>&1
  echo "== ln tower $run (rc $?, ${SECONDS} s)"
  grep -h "^| recsys\|compile s\|of it" $OUT/ln_$run.log | cut -c1-200
done
