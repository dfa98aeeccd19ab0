# Issue 27 after measure_budget_s (3 s of Triton compiles and timings per run of the pass) and the clock counting
# nested blocks once: every benchmark block's first compile, inference, Triton alone, cold caches (fresh HOME, Inductor and
# Triton caches per block), the process warmed first (--warm-process: Inductor's workers and imports paid by an
# unrelated compile); the towers over 3 rounds (their speed with the untuned default configs), the rest 1 round
# (compile times only: one round is not a timing).
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
OUT=${OUT:-/tmp/out}
for block in recsys_rms_tower recsys_ln_tower qwen3_1p7b_layer llama3_8b_layer bert_base_layer gpt2_medium_layer gemma3_4b_layer; do
  rounds=$([ ${block#recsys} != $block ] && echo 3 || echo 1)
  left=$((570 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_e_$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_e_$block TRITON_CACHE_DIR=/tmp/tri_e_$block \
    timeout $((left < 120 ? left : 120)) python blocks.py --blocks $block --modes inference --rounds $rounds --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --json $OUT/$block.json > $OUT/$block.log 2>&1
  echo "== $block (rc $?)"
  grep -h "^| \(recsys\|qwen\|llama\|bert\|gpt2\|gemma\)\|compile s\|of it" $OUT/$block.log | cut -c1-250
  grep -ho "site [A-Za-z]* [a-z_]* ([0-9, ]*)\|clear win\|measurement failed[^)]*)" $OUT/$block.log | sort | uniq -c | cut -c1-200
done
