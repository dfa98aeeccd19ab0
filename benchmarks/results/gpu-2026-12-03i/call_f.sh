# 1. call_d's pytest was cut by its timeout after the 8 test_regrouped tests passed: the three dynamic-shape tests
#    of test_hf_models alone; 2. beside them, call_d's wrong model-fuzz case (diag_case.py) under variants.
source benchmarks/device_setup.sh
cd /tmp/site
D=benchmarks/results/gpu-2026-12-03i
F="Warning\|warnings.warn\|Online softmax\|split the reduction\|important use case\|softmax\.$"
for v in all tuned regrouped older infer contiguous m64; do
  (TORCHINDUCTOR_CACHE_DIR=/tmp/ic_$v timeout 300 python $D/diag_case.py $v 2>&1 | grep -v "$F" | tail -40 > $OUT/diag_$v.log) &
done
timeout 420 python -m pytest tests/test_hf_models.py -v -p no:warnings --tb=short --durations=5 -k "ten_sequence" 2>&1 \
   | grep -v "DEBUG" | tail -60 | cut -c1-300 > $OUT/tests_ten.log
wait
tail -25 $OUT/tests_ten.log
for v in all tuned regrouped older infer contiguous m64; do echo "== $v"; grep -v "^  site" $OUT/diag_$v.log | tail -12 | cut -c1-200; done
grep "^  site" $OUT/diag_all.log | cut -c1-260
