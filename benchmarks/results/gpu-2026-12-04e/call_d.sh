# Thirty-third session, fourth call: the four GPU test files whole (call_c's ran past its 200 s limit, nothing
# failed), then the towers' first and second compile as in call_a, after DEFAULT_TILE_MIN_WAVES 3 -> 1.9.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 360 python -m pytest tests/test_direct_launch.py tests/test_selection.py tests/test_quack_backend.py \
  tests/test_regrouped.py -q -p no:cacheprovider --durations=8 > $OUT/gpu_tests.log 2>&1
echo "== GPU tests (rc $?, ${SECONDS} s)"; tail -14 $OUT/gpu_tests.log | cut -c1-200
grep -h "^FAILED\|^ERROR" $OUT/gpu_tests.log | head -10 | cut -c1-300
cd /tmp/site/benchmarks
for block in recsys_rms_tower recsys_ln_tower; do
  for run in first second; do
    left=$((580 - SECONDS)); [ $left -lt 40 ] && break
    HOME=/tmp/home_d_$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_d_$block TRITON_CACHE_DIR=/tmp/tri_d_$block \
      timeout $((left < 100 ? left : 100)) python blocks.py --blocks $block --modes inference --rounds 3 --warm-process \
      --random-embeds --backends default norm_fusion --gemm-backends triton --json $OUT/${block}_$run.json > $OUT/${block}_$run.log 2>&1
    echo "== $block $run (rc $?, ${SECONDS} s)"
    grep -h "^| recsys\|compile s\|of it" $OUT/${block}_$run.log | cut -c1-250
  done
done
