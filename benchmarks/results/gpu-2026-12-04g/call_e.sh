# Thirty-fifth session, fifth call: the code as shipped (compile_threads 8, model_win_margin 1.1, a direct launch
# whose per-call fold calls an op held to min_kernel_ms): GPU tests of the selection paths and the test_regrouped
# subset; GPT-2-medium (5 rounds, --host) and the LN tower (3 rounds), cold caches, first compile.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 150 python -m pytest tests/test_direct_launch.py tests/test_selection.py tests/test_quack_backend.py -q \
  -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
echo "== selection tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/gpu_tests.log | cut -c1-200
grep -h "^FAILED\|^ERROR" $OUT/gpu_tests.log | head -10 | cut -c1-300
timeout 170 python -m pytest tests/test_regrouped.py -q -p no:cacheprovider \
  -k "launched_from_inductor or dynamic_batch or survey or written_once or price_the or trained" > $OUT/regrouped.log 2>&1
echo "== regrouped subset (rc $?, ${SECONDS} s)"; tail -1 $OUT/regrouped.log | cut -c1-200
grep -h "^FAILED\|^ERROR" $OUT/regrouped.log | head -10 | cut -c1-300
cd /tmp/site/benchmarks
for spec in gpt2_medium_layer:5 recsys_ln_tower:3; do
  IFS=: read block rounds <<< "$spec"
  left=$((560 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_e$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_e$block TRITON_CACHE_DIR=/tmp/tri_e$block \
    timeout $((left < 120 ? left : 120)) python blocks.py --blocks $block --modes inference --rounds $rounds \
    --warm-process --host --random-embeds --backends default norm_fusion --gemm-backends triton > $OUT/${block}.log 2>&1
  echo "== $block (rc $?, ${SECONDS} s)"
  grep -h "^| \(gpt2\|recsys\)\|compile s\|of it\|host ms" $OUT/${block}.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}.log | cut -c1-160
  grep -h "op call per step" $OUT/${block}.log | grep -o "but the column.*" | head -2
done
