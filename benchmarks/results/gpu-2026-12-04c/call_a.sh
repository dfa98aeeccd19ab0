# 1. The post-norm GPU tests after the shared-memory filter (last session's call_k, never run), the whole file.
# 2. Issue 27: where the 65536x256x256 RMSNorm pair's time goes (fused 0.89x default on 12-04), and a shape it wins.
source benchmarks/device_setup.sh
cd /tmp/site
OUT=${OUT:-/tmp/out}
F="Warning\|warnings.warn"
timeout 420 python -m pytest tests/test_gpu_post_norm.py -q -p no:warnings --tb=short > $OUT/gpu_post_tests.log 2>&1
grep -E "^E |FAILED|passed|failed" $OUT/gpu_post_tests.log | cut -c1-300 | head -20; tail -c 300 $OUT/gpu_post_tests.log
timeout $((590 - SECONDS)) python benchmarks/diagnostics/profile_pair.py --shapes 65536x256x256 262144x256x256 2>&1 | grep -v "$F" > $OUT/profile_pair.log
cut -c1-400 $OUT/profile_pair.log
