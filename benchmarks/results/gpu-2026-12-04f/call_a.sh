# Thirty-fourth session, first call: BERT-base after the pricing fix (the normalized tensor's write counted once):
# first and second compile, 3 rounds each; then tests/test_regrouped.py alone (cut at 360 s last session).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
cd /tmp/site/benchmarks
for run in first second; do
  HOME=/tmp/home_a TORCHINDUCTOR_CACHE_DIR=/tmp/ind_a TRITON_CACHE_DIR=/tmp/tri_a \
    timeout 100 python blocks.py --blocks bert_base_layer --modes inference --rounds 3 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --json $OUT/bert_$run.json > $OUT/bert_$run.log 2>&1
  echo "== bert $run (rc $?, ${SECONDS} s)"
  grep -h "^| bert\|compile s\|of it" $OUT/bert_$run.log | cut -c1-250
  grep -h "site [A-Za-z]* " $OUT/bert_$run.log | cut -c1-420
done
cd /tmp/site
left=$((575 - SECONDS))
timeout $left python -m pytest tests/test_regrouped.py -q -p no:cacheprovider --durations=10 > $OUT/regrouped_tests.log 2>&1
echo "== test_regrouped (rc $?, ${SECONDS} s)"; tail -16 $OUT/regrouped_tests.log | cut -c1-200
grep -h "^FAILED\|^ERROR" $OUT/regrouped_tests.log | head -10 | cut -c1-300
