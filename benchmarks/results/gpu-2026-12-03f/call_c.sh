# call_a's BERT NaN did not show in bert_nan.py (2 layers, one step, alone on the GPU). Here: convergence.py's
# BERT run again, alone on the GPU; then bert_nan.py with 4 layers after a policy-auto compile in the same process.
source benchmarks/device_setup.sh
cd /tmp/site
timeout 200 python benchmarks/convergence.py --models bert --json $OUT/convergence_bert_alone.json > $OUT/convergence_bert_alone.log 2>&1
grep "^|\|PASS\|FAIL" $OUT/convergence_bert_alone.log | tail -6
timeout 300 python benchmarks/results/gpu-2026-12-03f/bert_nan.py 4 auto-first 2>&1 | grep -v "Warning\|warnings.warn" > $OUT/bert_nan4.log
grep -v "^  gemm\|^  site" $OUT/bert_nan4.log | cut -c1-300; grep "^  gemm" $OUT/bert_nan4.log | grep -v "rel err \['[0-9.e-]*'\(, '[0-9.e-]*'\)*\] config" | head
