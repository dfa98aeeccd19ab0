# After the fixes of call_a's model-fuzz failures (u from the weight's rounding in the training fold; heads no tile
# holds left with a reason): 1. the three failing cases again, each in its own process; 2. the model fuzz with
# seed 0 (call_a's draws, so the head_dim-1000 crashes come back if not fixed); 3. convergence.py's BERT twice,
# alone (the second from the FX cache, as call_a's bert2 whose policy-auto peak read 1.075x).
source benchmarks/device_setup.sh
cd /tmp/site
i=0
while read -r c; do
  i=$((i + 1))
  (timeout 150 python tests/fuzz_models.py --case "$c" > $OUT/case_$i.log 2>&1; echo "rc $?" >> $OUT/case_$i.log) &
done < benchmarks/results/gpu-2026-12-03g/failed_cases.txt
wait
for f in $OUT/case_*.log; do echo "== $f"; grep -v "Warning\|warnings.warn" $f | tail -3 | cut -c1-300; done
timeout 260 python tests/fuzz_models.py --cases 600 --workers 12 --time-limit 200 > $OUT/fuzz_models_b.log 2>&1; echo "rc $?" >> $OUT/fuzz_models_b.log
grep -v "Warning\|warnings.warn\|cases, 0 wrong$" $OUT/fuzz_models_b.log | grep -v "^\s*$" | tail -30 | cut -c1-400
for run in bert_c1 bert_c2; do
  timeout 100 python benchmarks/convergence.py --models bert --json $OUT/conv_$run.json > $OUT/conv_$run.log 2>&1
  echo "$run rc $?"; grep "^|\|PASS\|FAIL\|not finite" $OUT/conv_$run.log | tail -5 | cut -c1-200
done
