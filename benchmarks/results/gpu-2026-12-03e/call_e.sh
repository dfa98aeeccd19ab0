# Issue 29's fuzz target: >= 1000 GPU cases per family (consumer, producer) of the regrouped epilogue GEMM in one
# call, the current defaults (one-MUFU activations, the residual read after the k-loop, two-segment statistics).
source benchmarks/device_setup.sh
cd /tmp/site
timeout 470 python tests/fuzz_regrouped.py --cases 2100 --workers 6 > $OUT/fuzz.log 2>&1; echo "rc $?" >> $OUT/fuzz.log
grep -v "cases, 0 wrong$" $OUT/fuzz.log | tail -40
grep "cases, 0 wrong$" $OUT/fuzz.log | tail -2
