# The failed post-norm GPU tests once more, after the shared-memory estimate counts the residual's tile (call_j's
# pytest was cut by its timeout after 16 F of 32).
source benchmarks/device_setup.sh
cd /tmp/site
OUT=${OUT:-/tmp/out}
timeout 140 python -m pytest tests/test_gpu_post_norm.py -q -p no:warnings -x --tb=short \
  -k "every_config or fp32_operands or shifted or tuned_config" > $OUT/tests_post.log 2>&1
grep -E "^E |Error|FAILED|passed|failed" $OUT/tests_post.log | cut -c1-300 | head -20; tail -c 300 $OUT/tests_post.log
