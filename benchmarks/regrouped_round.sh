# One GPU round of the regrouped normalization: its tests, the epilogue GEMM against cuBLAS, and the blocks.
#   bash benchmarks/regrouped_round.sh PART   (PART: a = tests, the epilogue GEMMs, the recsys towers;
#                                              b = the Llama-3-8B and Qwen3 layers; c = the recsys towers with
#                                              max-autotune; d = 1000 fuzzed cases of the epilogue GEMM;
#                                              e = BERT (post-norm), GPT-2-medium and Llama-3-8B, the latter
#                                              with the selection's margin)
set -o pipefail
source benchmarks/device_setup.sh
cd /tmp/site
OUT=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee $OUT/gpu.txt
case "$1" in
a)
  timeout 150 python -m pytest tests/test_regrouped.py -q -x -p no:warnings 2>&1 | tail -15 | tee $OUT/tests.log
  (cd benchmarks && timeout 200 python epilogue_gemm.py --rounds 3 --json $OUT/epilogue.json 2>&1 | tee $OUT/epilogue.log)
  (cd benchmarks && timeout 300 python blocks.py --blocks recsys_ln_tower recsys_rms_tower \
     --json $OUT/blocks_a.json 2>&1 | tee $OUT/blocks_a.log)
  ;;
b)
  timeout 100 python -m pytest tests/test_regrouped.py -q -x -p no:warnings 2>&1 | tail -4 | tee $OUT/tests.log
  (cd benchmarks && timeout 420 python blocks.py --blocks llama3_8b_layer qwen3_1p7b_layer --rounds 3 \
     --backends default norm_fusion --json $OUT/blocks_b.json 2>&1 | tee $OUT/blocks_b.log)
  ;;
e)
  (cd benchmarks && timeout 560 python blocks.py --blocks bert_base_layer gpt2_medium_layer llama3_8b_layer --rounds 3 \
     --backends default norm_fusion --json $OUT/blocks_e.json 2>&1 | tee $OUT/blocks_e.log)
  ;;
d)
  timeout 500 python tests/fuzz_regrouped.py --cases 1000 2>&1 | grep -v "runs its torch reference" | tee $OUT/fuzz.log
  ;;
c)
  (cd benchmarks && timeout 420 python blocks.py --blocks recsys_rms_tower recsys_ln_tower --rounds 3 \
     --json $OUT/blocks_c.json 2>&1 | tee $OUT/blocks_c.log)
  ;;
esac
