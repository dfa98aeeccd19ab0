# Triton alone. Issue 29 in one call: the fuzz (>= 1000 GPU cases per family: consumer, producer, per_head) on 11
# workers, and beside it, on the same GPU, the convergence runs on the Markov next-token task (Llama, then BERT).
# The convergence runs judge losses and peak memory (per process), not time, so sharing the GPU does not bias them.
source benchmarks/device_setup.sh
cd /tmp/site
( for model in llama bert; do
    timeout 230 python benchmarks/convergence.py --models $model --json $OUT/convergence_$model.json > $OUT/convergence_$model.log 2>&1
    echo "rc $?" >> $OUT/convergence_$model.log
  done ) &
timeout 545 python tests/fuzz_regrouped.py --cases 4000 --workers 11 --time-limit 470 2>&1 | grep -v "runs its torch reference" > $OUT/fuzz.log; echo "rc $?" >> $OUT/fuzz.log
wait
grep -v "cases, 0 wrong$" $OUT/fuzz.log | tail -30
for model in llama bert; do grep "^|\|PASS\|FAIL\|^rc\|Error" $OUT/convergence_$model.log | tail -8; done
