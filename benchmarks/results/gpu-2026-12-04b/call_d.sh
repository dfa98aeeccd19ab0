# Issue 28's kernel split on the GPU: the post-norm on the epilogue GEMM (tests), then its sweep on the new code.
# call_e runs the same sweep on the code before the split (_before/, carried: git archive of 80f2e70).
source benchmarks/device_setup.sh
cd /tmp/site
OUT=${OUT:-/tmp/out}
timeout 240 python -m pytest tests/test_gpu_post_norm.py tests/test_sm90_compile.py -q -p no:warnings --tb=short 2>&1 | tail -15 | tee $OUT/tests_post.log
for norm in rms ln; do
  timeout 150 python benchmarks/postnorm.py --norm $norm --no-max-autotune --shapes 65536x512x256 262144x256x128 262144x1024x256 \
    --json $OUT/postnorm_after_$norm.json 2>&1 | grep "^|\|median\|worst\|Error" | tee $OUT/postnorm_after_$norm.log
done
