# After `bash benchmarks/quack_round.sh unpack` (carry .cute/a); this call carries .cute/b.
# Which guard recompiles the dynamic-batch test; the Llama-3-8B layer (inference, training) and the Qwen3 layer
# (training) with the host pricing and the short timer, first compile profiled.
source .cute/b/install.sh >/dev/null 2>&1 || exit 3
source benchmarks/device_setup.sh
cd /tmp/site
TORCH_LOGS=recompiles,guards timeout 100 python -m pytest tests/test_regrouped.py -q -p no:warnings --tb=short \
  -k "dynamic_batch_launched" > $OUT/dynamic.log 2>&1
grep -i -B2 -A12 "recompil" $OUT/dynamic.log | head -60 > $OUT/dynamic_recompiles.log
cd benchmarks
timeout 260 python blocks.py --blocks llama3_8b_layer --modes inference train --rounds 3 --random-embeds \
  --backends default norm_fusion --host --compile-profile --json $OUT/llama.json > $OUT/llama.log 2>&1
timeout 190 python blocks.py --blocks qwen3_1p7b_layer --modes train --rounds 3 --random-embeds \
  --backends default norm_fusion --host --compile-profile --json $OUT/qwen3_train.json > $OUT/qwen3_train.log 2>&1
tail -3 $OUT/dynamic.log; head -30 $OUT/dynamic_recompiles.log; grep -h "^|\|host ms\|compile s" $OUT/llama.log $OUT/qwen3_train.log
