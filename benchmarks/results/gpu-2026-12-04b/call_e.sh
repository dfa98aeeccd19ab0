# The post-norm sweep on the code before issue 28's kernel split (the norm_gemm kernel; _before/ = git archive of
# 80f2e70, carried), the same shapes as call_d, then the regrouped GPU tests on the new code.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
cd /tmp/site/_before/benchmarks
for norm in rms ln; do
  PYTHONPATH=/tmp/site/_before timeout 150 python postnorm.py --norm $norm --no-max-autotune --shapes 65536x512x256 262144x256x128 262144x1024x256 \
    --json $OUT/postnorm_before_$norm.json 2>&1 | grep "^|\|median\|worst\|Error" | tee $OUT/postnorm_before_$norm.log
done
cd /tmp/site
timeout 200 python -m pytest tests/test_gpu.py tests/test_direct_launch.py -q -p no:warnings --tb=short 2>&1 | tail -12 | tee $OUT/tests_gpu.log
