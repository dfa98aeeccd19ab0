# 1. call_b's kernel-fuzz failures (per-head + RoPE + write_aux, fp32, M = 3) at every config, M and dtype;
# 2. dynamic shapes with several dynamic dims and eps as a graph tensor (the regrouped family used to decline
#    both): the GPU tests (ten lengths compiled once, launched from Inductor's code; the older dynamic tests);
# 3. the model fuzz with another seed for the rest (its log filtered: call_a's was too large to come back).
source benchmarks/device_setup.sh
cd /tmp/site
timeout 150 python benchmarks/results/gpu-2026-12-03h/diag_per_head.py 2>&1 | grep -v "Warning\|warnings.warn" | tee $OUT/diag_per_head.log | cut -c1-300
timeout 170 python -m pytest tests/test_hf_models.py tests/test_regrouped.py -q -x -p no:warnings --tb=short \
   -k "ten_sequence or dynamic" 2>&1 | tail -25 | cut -c1-300 | tee $OUT/tests_dynamic.log
F="Warning\|warnings.warn\|Online softmax\|split the reduction\|important use case\|softmax\.$"
timeout 200 python tests/fuzz_models.py --cases 600 --workers 12 --seed 8 --time-limit 130 2>&1 | grep -v "$F" > $OUT/fuzz_models.log
echo "fuzz rc ${PIPESTATUS[0]}"
grep -v "cases, 0 wrong$" $OUT/fuzz_models.log | grep -v "^\s*$" | tail -40 | cut -c1-600
