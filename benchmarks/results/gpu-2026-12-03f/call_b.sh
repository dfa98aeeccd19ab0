# BERT's NaN loss with policy always (call_a): where it comes from (bert_nan.py).
source benchmarks/device_setup.sh
cd /tmp/site
timeout 400 python benchmarks/results/gpu-2026-12-03f/bert_nan.py 2 2>&1 | grep -v "Warning\|warnings.warn" | tee $OUT/bert_nan.log | cut -c1-400 | tail -80
