# Thirty-fourth session, third call: call_b after its fix (a survey's incomplete measurement was kept in the
# measurement cache, so the pass's run never timed the kernels the survey had compiled: "triton: None").
# The survey's GPU test; first compiles (cold caches, warm process) of the blocks that had close calls.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 120 python -m pytest tests/test_regrouped.py -q -p no:cacheprovider -k "survey" > $OUT/tests.log 2>&1
echo "== tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/tests.log | cut -c1-200; grep -h "^E \|^FAILED" $OUT/tests.log | head -12 | cut -c1-300
cd /tmp/site/benchmarks
for spec in recsys_ln_tower:first:3:8 gpt2_medium_layer:first:1:8 qwen3_1p7b_layer:first:1:8 bert_base_layer:first:1:8 \
            llama3_8b_layer:first:1:8 gpt2_medium_layer:nosurvey:1:0; do
  IFS=: read block run rounds threads <<< "$spec"
  left=$((520 - SECONDS)); [ $left -lt 40 ] && break
  tag=$([ $run = nosurvey ] && echo n || echo s)
  HOME=/tmp/home_$tag$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$tag$block TRITON_CACHE_DIR=/tmp/tri_$tag$block \
    timeout $((left < 110 ? left : 110)) python blocks.py --blocks $block --modes inference --rounds $rounds --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-threads $threads \
    > $OUT/${block}_$run.log 2>&1
  echo "== $block $run (rc $?, ${SECONDS} s)"
  grep -h "^| \(recsys\|qwen\|bert\|gpt2\|llama\)\|compile s\|of it" $OUT/${block}_$run.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}_$run.log | grep -v qk_norm | cut -c1-300
done
