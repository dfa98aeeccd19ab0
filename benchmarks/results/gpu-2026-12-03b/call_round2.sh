# After `bash benchmarks/quack_round.sh unpack` (carry .cute/a); this call carries .cute/b.
# The dynamic-batch test without run_and_get_code's Dynamo reset; the per-head norm tests (training: aux before
# the norm); where an epilogue GEMM op call's host time goes (Triton, Quack); the Qwen3 layer in training (QK-norm
# sites now taken) and the Llama-3-8B layer in training (the older family's lm_head priced without the norm's
# write).
source .cute/b/install.sh >/dev/null 2>&1 || exit 3
source benchmarks/device_setup.sh
cd /tmp/site
timeout 100 python -m pytest tests/test_regrouped.py -q -p no:warnings --tb=short \
  -k "dynamic_batch_launched or per_head or qk_norm_and_rope" 2>&1 | tail -15 > $OUT/tests.log
cd benchmarks
timeout 80 python epilogue_host.py 16384x2048x2048 262144x256x1024 > $OUT/epilogue_host.log 2>&1
timeout 170 python blocks.py --blocks qwen3_1p7b_layer --modes train --rounds 3 --random-embeds \
  --backends default norm_fusion --json $OUT/qwen3_train.json > $OUT/qwen3_train.log 2>&1
timeout 150 python blocks.py --blocks llama3_8b_layer --modes train --rounds 3 --random-embeds \
  --backends default norm_fusion --json $OUT/llama_train.json > $OUT/llama_train.log 2>&1
tail -4 $OUT/tests.log; head -12 $OUT/epilogue_host.log; grep -h "^|\|compile s" $OUT/qwen3_train.log $OUT/llama_train.log
