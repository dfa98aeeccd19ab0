# NEXT SESSION (not run): BERT's NaN under a shared GPU (call_a), reproduced as call_a ran it — the fuzz on 11
# workers from t = 0, convergence.py's Llama then BERT beside it — with Inductor's NaN asserts on (the first
# buffer that turns NaN names its kernel), and BERT twice. Then the model fuzz's first GPU run.
source benchmarks/device_setup.sh
cd /tmp/site
( timeout 330 python tests/fuzz_regrouped.py --cases 4000 --seed 2 --workers 11 --time-limit 270 2>&1 | grep -v "runs its torch reference" > $OUT/fuzz_g.log ) &
for model in llama bert bert; do
  TORCHINDUCTOR_NAN_ASSERTS=1 timeout 150 python benchmarks/convergence.py --models $model --json $OUT/conv_g_$model.json >> $OUT/conv_g_$model.log 2>&1
  grep "^|\|PASS\|FAIL\|not finite\|assert\|Error" $OUT/conv_g_$model.log | tail -8 | cut -c1-300
done
wait
grep -v "cases, 0 wrong$" $OUT/fuzz_g.log | tail -6
timeout 200 python tests/fuzz_models.py --cases 600 --workers 12 --time-limit 140 > $OUT/fuzz_models.log 2>&1; echo "rc $?" >> $OUT/fuzz_models.log
grep -v "Warning\|warnings.warn\|cases, 0 wrong$" $OUT/fuzz_models.log | tail -40 | cut -c1-400
