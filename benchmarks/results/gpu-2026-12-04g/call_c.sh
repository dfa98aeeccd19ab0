# Thirty-fifth session, third call: the tests that fake every GEMM winning, now without a measurement budget, with
# the survey forced on; then GPT-2-medium and BERT-base first compiles with the survey on and off (model_win_margin
# 1.1), to decide compile_threads' default.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
PYTHONPATH=$PWD/benchmarks/results/gpu-2026-12-04g:$PYTHONPATH timeout 200 python -m pytest tests/test_regrouped.py -q \
  -p no:cacheprovider -p survey_on -k "launched_from_inductor or dynamic_batch or survey or written_once" \
  > $OUT/tests.log 2>&1
echo "== tests, survey on (rc $?, ${SECONDS} s)"; tail -1 $OUT/tests.log | cut -c1-200
grep -h "^E \|^FAILED" $OUT/tests.log | head -12 | cut -c1-300
cd /tmp/site/benchmarks
for spec in gpt2_medium_layer:8 gpt2_medium_layer:0 bert_base_layer:8 bert_base_layer:0; do
  IFS=: read block threads <<< "$spec"
  left=$((540 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_$block$threads TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$block$threads TRITON_CACHE_DIR=/tmp/tri_$block$threads \
    timeout $((left < 110 ? left : 110)) python blocks.py --blocks $block --modes inference --rounds 1 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-threads $threads \
    > $OUT/${block}_t$threads.log 2>&1
  echo "== $block first, threads $threads (rc $?, ${SECONDS} s)"
  grep -h "^| \(gpt2\|bert\)\|compile s\|of it" $OUT/${block}_t$threads.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}_t$threads.log | cut -c1-200
done
