# 1. diag_nan.py (call_a's model-fuzz NaN: fp32, dynamic=True, the second length) beside 2. the kernel fuzz on
# the Triton kernels to the call's limit (issue 29: >= 1000 cases per family in one call).
source benchmarks/device_setup.sh
cd /tmp/site
(TORCHINDUCTOR_CACHE_DIR=/tmp/ic_nan timeout 200 python benchmarks/results/gpu-2026-12-03h/diag_nan.py 2>&1 \
   | grep -v "Warning\|warnings.warn\|Online softmax\|split the reduction\|important use case\|softmax\.$" > $OUT/diag_nan.log; echo "rc $?" >> $OUT/diag_nan.log) &
timeout 555 python tests/fuzz_regrouped.py --cases 8000 --workers 13 --seed 5 --time-limit 500 2>&1 \
   | grep -v "runs its torch reference" > $OUT/fuzz_kernels.log; echo "fuzz rc $?"
wait
cat $OUT/diag_nan.log | cut -c1-300 | tail -40
grep -v "cases, 0 wrong$" $OUT/fuzz_kernels.log | tail -30 | cut -c1-300
