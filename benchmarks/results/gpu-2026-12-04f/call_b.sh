# Thirty-fourth session, second call: the pricing of bytes Inductor never writes (BERT's head) and the survey
# (compile_threads: the close calls' kernels compiled on threads before the rewrite). The new GPU tests; then
# first compiles (cold caches, warm process): BERT-base with the survey and without it (--compile-threads 0),
# BERT's warm second, the towers, GPT-2-medium and Qwen3-1.7B-like.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 150 python -m pytest tests/test_regrouped.py -q -p no:cacheprovider -k "survey or price_the" > $OUT/tests.log 2>&1
echo "== tests (rc $?, ${SECONDS} s)"; tail -3 $OUT/tests.log | cut -c1-200; grep -h "^E \|^FAILED" $OUT/tests.log | head -12 | cut -c1-300
cd /tmp/site/benchmarks
for spec in bert_base_layer:first:3:8 bert_base_layer:second:3:8 bert_base_layer:nosurvey:1:0 recsys_rms_tower:first:1:8 \
            recsys_ln_tower:first:1:8 gpt2_medium_layer:first:1:8 qwen3_1p7b_layer:first:1:8; do
  IFS=: read block run rounds threads <<< "$spec"
  left=$((575 - SECONDS)); [ $left -lt 40 ] && break
  tag=$([ $run = nosurvey ] && echo n || echo s)
  HOME=/tmp/home_$tag$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$tag$block TRITON_CACHE_DIR=/tmp/tri_$tag$block \
    timeout $((left < 110 ? left : 110)) python blocks.py --blocks $block --modes inference --rounds $rounds --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-threads $threads \
    > $OUT/${block}_$run.log 2>&1
  echo "== $block $run (rc $?, ${SECONDS} s)"
  grep -h "^| \(recsys\|qwen\|bert\|gpt2\)\|compile s\|of it" $OUT/${block}_$run.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}_$run.log | cut -c1-330
done
