# Diagnosis of call_b: 1. the fp16 |μ| = 1000σ case (failed_cases.txt line 2) at M 2048, every error, with the
# fixed and the old u, and the Triton code of the fold (does the bit-cast round trip survive?); 2. convergence's
# BERT from a warm FX cache (call_b's bert_c2: policy auto 1.078x peak with 0 sites) and then with Inductor's caches off.
source benchmarks/device_setup.sh
cd /tmp/site
D=benchmarks/results/gpu-2026-12-03g
c=$(sed -n 2p $D/failed_cases.txt)
TORCH_LOGS=output_code timeout 100 python $D/diag_case.py "$c" 2048 > $OUT/diag_fixed.log 2>&1 &
OLD_U=1 timeout 100 python $D/diag_case.py "$c" 2048 > $OUT/diag_old.log 2>&1 &
wait
grep -v "^V1203\|Warning\|warnings.warn" $OUT/diag_old.log | grep "^old\|^  " | grep -v "^  site" | head -14
grep -v "^V1203\|Warning\|warnings.warn" $OUT/diag_fixed.log | grep "^fixed\|^  " | head -18 | cut -c1-220
grep -c "bitcast" $OUT/diag_fixed.log
for run in c3_cold c3_warm; do
  timeout 90 python benchmarks/convergence.py --models bert --json $OUT/conv_bert_$run.json > $OUT/conv_bert_$run.log 2>&1
  echo "$run rc $?"; grep "^| bert" $OUT/conv_bert_$run.log | cut -c1-200
done
TORCHINDUCTOR_FX_GRAPH_CACHE=0 TORCHINDUCTOR_AUTOGRAD_CACHE=0 timeout 90 python benchmarks/convergence.py --models bert --json $OUT/conv_bert_c4.json > $OUT/conv_bert_c4.log 2>&1
echo "c4 (caches off) rc $?"; grep "^| bert" $OUT/conv_bert_c4.log | cut -c1-200
