# Thirty-third session, third call: the GPU tests again (one CPU-interpreter test now skipped on the GPU), then
# every block config the tuner offers at the transformers blocks' GEMMs of under three waves (the default tile's
# floor, epilogue_gemm.DEFAULT_TILE_MIN_WAVES), which the first compile tunes (8 configs, ~4 s each site):
# does the default tile hold there too?
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 200 python -m pytest tests/test_direct_launch.py tests/test_selection.py tests/test_quack_backend.py \
  tests/test_regrouped.py -q -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
echo "== GPU tests (rc $?, ${SECONDS} s)"; tail -3 $OUT/gpu_tests.log | cut -c1-300
grep -h "^FAILED\|^ERROR" $OUT/gpu_tests.log | head -10 | cut -c1-300
timeout $((560 - SECONDS)) python benchmarks/diagnostics/epilogue_configs.py --grid --rounds 3 --json $OUT/small_grid.json \
  --sites consumer_ln:16384x768x768 producer_ln:16384x3072x768 producer_ln:16384x768x768 \
          consumer_ln:8192x1024x1024 producer_ln:8192x4096x1024 consumer_rms:8192x1024x1024 \
          consumer_rms:4096x2048x2048 producer_rms:8192x4096x1024 activation:4096x4096x2048:silu > $OUT/small_grid.log 2>&1
echo "== grid (rc $?, ${SECONDS} s)"; cat $OUT/small_grid.log | cut -c1-200
