# After the u fix (norm_fusion::column_sums) and the convergence harness's gc: 1. the three 16-bit cases that
# failed in gpu-2026-12-03g (each in its own process) and diag_y.py (the consumer's output alone at 1000σ),
# beside convergence's BERT from a cold cache; 2. BERT again from the warm cache (the 1.078x peak of 12-03g);
# 3. the model fuzz with a new seed for the rest of the call.
source benchmarks/device_setup.sh
cd /tmp/site
P=benchmarks/results/gpu-2026-12-03g
export TORCHINDUCTOR_CACHE_DIR=/tmp/ic_conv
i=0
while read -r c; do
  i=$((i + 1))
  (TORCHINDUCTOR_CACHE_DIR=/tmp/ic_case$i timeout 130 python tests/fuzz_models.py --case "$c" > $OUT/case_$i.log 2>&1; echo "rc $?" >> $OUT/case_$i.log) &
done < $P/failed_cases.txt
(TORCHINDUCTOR_CACHE_DIR=/tmp/ic_diag timeout 130 python $P/diag_y.py > $OUT/diag_y.log 2>&1; echo "rc $?" >> $OUT/diag_y.log) &
timeout 125 python benchmarks/convergence.py --models bert --json $OUT/conv_bert_cold.json > $OUT/conv_bert_cold.log 2>&1
echo "cold rc $?"; grep "^| bert\|PASS\|FAIL\|not finite" $OUT/conv_bert_cold.log | tail -4 | cut -c1-220
wait
for f in $OUT/case_*.log; do echo "== $f"; grep -v "Warning\|warnings.warn" $f | tail -3 | cut -c1-300; done
grep -v "Warning\|warnings.warn" $OUT/diag_y.log | tail -34 | cut -c1-200
timeout 90 python benchmarks/convergence.py --models bert --json $OUT/conv_bert_warm.json > $OUT/conv_bert_warm.log 2>&1
echo "warm rc $?"; grep "^| bert\|PASS\|FAIL\|not finite" $OUT/conv_bert_warm.log | tail -4 | cut -c1-220
unset TORCHINDUCTOR_CACHE_DIR
timeout 250 python tests/fuzz_models.py --cases 600 --workers 12 --seed 7 --time-limit 200 > $OUT/fuzz_models.log 2>&1; echo "rc $?" >> $OUT/fuzz_models.log
grep -v "Warning\|warnings.warn\|cases, 0 wrong$" $OUT/fuzz_models.log | grep -v "^\s*$" | tail -40 | cut -c1-400
