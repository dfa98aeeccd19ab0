# Thirty-fifth session, first call: (1) the -k subset of test_regrouped.py that failed with the survey on
# (12-04f), now with the test's in-memory measurement cache isolated, the survey forced on (-p survey_on);
# (2) first compiles (cold caches, warm process) with model_win_margin 1.1: the towers, Qwen3, Llama.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
PYTHONPATH=$PWD/benchmarks/results/gpu-2026-12-04g:$PYTHONPATH timeout 220 python -m pytest tests/test_regrouped.py -q \
  -p no:cacheprovider -p survey_on \
  -k "trained or launched_from_inductor or folded or dynamic_batch or written_once or read_elsewhere or survey" \
  > $OUT/tests.log 2>&1
echo "== tests, survey on (rc $?, ${SECONDS} s)"; tail -1 $OUT/tests.log | cut -c1-200
grep -h "^E \|^FAILED" $OUT/tests.log | head -12 | cut -c1-300
cd /tmp/site/benchmarks
for spec in recsys_ln_tower:3:0 recsys_rms_tower:3:0 qwen3_1p7b_layer:1:8 llama3_8b_layer:1:8; do
  IFS=: read block rounds threads <<< "$spec"
  left=$((540 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$block TRITON_CACHE_DIR=/tmp/tri_$block \
    timeout $((left < 110 ? left : 110)) python blocks.py --blocks $block --modes inference --rounds $rounds --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-threads $threads \
    > $OUT/${block}_first.log 2>&1
  echo "== $block first, threads $threads (rc $?, ${SECONDS} s)"
  grep -h "^| \(recsys\|qwen\|llama\)\|compile s\|of it" $OUT/${block}_first.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}_first.log | grep -v qk_norm | cut -c1-260
done
