# Third call: the fold kernel only where u or Wβ is needed (LayerNorm; W·γ alone stays Inductor's), tests; the LN
# tower's first compile A/B, fold kernel against the torch-ops fold (fold_torch_ops.py), two processes each,
# alternating; GPT-2-medium with its sites fused (min_speedup 1.0, a 30 s measurement budget), host per step.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 200 python -m pytest tests/test_regrouped.py -q -p no:cacheprovider \
  -k "weight_fold or folded or dynamic_batch or written_once or trained" > $OUT/regrouped.log 2>&1
echo "== regrouped subset (rc $?, ${SECONDS} s)"; tail -1 $OUT/regrouped.log | cut -c1-200
grep -h "^FAILED\|^ERROR" $OUT/regrouped.log | head -10 | cut -c1-300
cd /tmp/site/benchmarks
for run in kernel1 torch1 kernel2 torch2; do
  driver=blocks.py; [ ${run#torch} != $run ] && driver=results/gpu-2026-12-04h/fold_torch_ops.py
  HOME=/tmp/home_c$run TORCHINDUCTOR_CACHE_DIR=/tmp/ind_c$run TRITON_CACHE_DIR=/tmp/tri_c$run \
    timeout 100 python $driver --blocks recsys_ln_tower --modes inference --rounds 1 \
    --warm-process --random-embeds --backends default norm_fusion --gemm-backends triton > $OUT/ln_$run.log 2>&1
  echo "== ln tower $run (rc $?, ${SECONDS} s)"
  grep -h "^| recsys\|compile s\|of it" $OUT/ln_$run.log | cut -c1-200
done
left=$((570 - SECONDS))
HOME=/tmp/home_cg TORCHINDUCTOR_CACHE_DIR=/tmp/ind_cg TRITON_CACHE_DIR=/tmp/tri_cg \
  timeout $((left < 150 ? left : 150)) python blocks.py --blocks gpt2_medium_layer --modes inference --rounds 3 \
  --warm-process --host --random-embeds --backends default norm_fusion --gemm-backends triton --min-speedup 1.0 \
  --plugin-option measure_budget_s=30 > $OUT/gpt2.log 2>&1
echo "== gpt2 (rc $?, ${SECONDS} s)"
grep -h "^| gpt2\|compile s\|of it\|host ms" $OUT/gpt2.log | cut -c1-250
grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/gpt2.log | cut -c1-200
