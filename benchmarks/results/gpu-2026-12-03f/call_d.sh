# Does BERT's NaN (call_a: convergence.py beside the fuzz) come back when the GPU is shared again? The fuzz (new
# seed, 11 workers) in the background; in front, convergence.py's BERT, then bert_nan.py (4 layers, policy auto
# first, each variant's forward twice, every epilogue GEMM checked under launch "op").
source benchmarks/device_setup.sh
cd /tmp/site
timeout 330 python tests/fuzz_regrouped.py --cases 4000 --seed 1 --workers 11 --time-limit 270 2>&1 | grep -v "runs its torch reference" > $OUT/fuzz_d.log &
sleep 15
timeout 150 python benchmarks/convergence.py --models bert --json $OUT/convergence_bert_shared.json > $OUT/convergence_bert_shared.log 2>&1
grep "^|\|PASS\|FAIL" $OUT/convergence_bert_shared.log | tail -6
timeout 160 python benchmarks/results/gpu-2026-12-03f/bert_nan.py 4 auto-first quiet 2>&1 | grep -v "Warning\|warnings.warn" > $OUT/bert_nan_shared.log
grep -v "^  site" $OUT/bert_nan_shared.log | cut -c1-300 | head -60
wait
grep -v "cases, 0 wrong$" $OUT/fuzz_d.log | tail -22
