# Why 17 post-norm GPU tests failed in call_d (its log kept only the summary): three of them with full tracebacks,
# then issue 27's first-compile round (call_h).
source benchmarks/device_setup.sh
cd /tmp/site
OUT=${OUT:-/tmp/out}
timeout 100 python -m pytest tests/test_gpu_post_norm.py -p no:warnings --tb=short -q \
  -k "2048-1024-192-rms-dtype0 or fp32_operands or 100.0-dtype0 or 1000-256-256-ln-dtype1" > $OUT/tests_post_tb.log 2>&1
grep -E "^E |Error|assert|passed|failed" $OUT/tests_post_tb.log | cut -c1-400 | head -40
bash benchmarks/results/gpu-2026-12-04b/call_h.sh
