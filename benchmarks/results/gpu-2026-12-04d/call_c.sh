# Issue 27 after the pattern cache, the untuned default config (epilogue_gemm.default_config) and the cost
# model's clear wins (selection._decided_by_model): the towers' first compile (cold) and speed (3 rounds), then
# a new process with the plugin's caches warm; the Qwen3-1.7B-like layer's first compile (cold).
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
OUT=${OUT:-/tmp/out}
for block in recsys_rms_tower recsys_ln_tower; do
  for run in cold plugin_warm; do
    [ $run = cold ] && rm -rf /tmp/home_$block
    rounds=$([ $run = cold ] && echo 3 || echo 1)
    HOME=/tmp/home_$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_${block}_$run TRITON_CACHE_DIR=/tmp/tri_${block}_$run \
      timeout 150 python blocks.py --blocks $block --modes inference --rounds $rounds \
      --backends default norm_fusion --gemm-backends triton --json $OUT/${block}_$run.json > $OUT/${block}_$run.log 2>&1
    echo "== $block $run"
    grep -h "^| recsys\|compile s\|of it" $OUT/${block}_$run.log | cut -c1-250
    grep -ho "site [A-Za-z]* regrouped_norm ([0-9, ]*)\|epilogue GEMM on triton[ ,][^(]*\|clear win\|producer GEMM: [^(]*" $OUT/${block}_$run.log | cut -c1-200 | sort | uniq -c
  done
done
HOME=/tmp/home_q TORCHINDUCTOR_CACHE_DIR=/tmp/ind_q TRITON_CACHE_DIR=/tmp/tri_q timeout $((560 - SECONDS)) \
  python blocks.py --blocks qwen3_1p7b_layer --modes inference --rounds 1 --random-embeds --backends default norm_fusion \
  --gemm-backends triton --json $OUT/qwen3_cold.json > $OUT/qwen3_cold.log 2>&1
echo "== qwen3_1p7b_layer cold"
grep -h "compile s\|of it" $OUT/qwen3_cold.log | cut -c1-250
grep -h "site " $OUT/qwen3_cold.log | cut -c1-220
