# After `bash benchmarks/quack_round.sh unpack` (carry .cute/a); this call carries .cute/b.
# The dynamic-batch test without run_and_get_code's Dynamo reset; where an epilogue GEMM op call's host time
# goes (Triton, Quack); the towers (compile time with the cost-model screen); the Llama-3-8B layer (training:
# the older family's lm_head priced without the norm's write).
source .cute/b/install.sh >/dev/null 2>&1 || exit 3
source benchmarks/device_setup.sh
cd /tmp/site
timeout 100 python -m pytest tests/test_regrouped.py -q -p no:warnings --tb=short -k "dynamic_batch_launched" \
  2>&1 | tail -15 > $OUT/dynamic.log
cd benchmarks
timeout 90 python epilogue_host.py 16384x2048x2048 262144x256x1024 > $OUT/epilogue_host.log 2>&1
timeout 170 python blocks.py --blocks recsys_rms_tower recsys_ln_tower --modes inference --rounds 3 \
  --backends default norm_fusion --host --json $OUT/towers.json > $OUT/towers.log 2>&1
timeout 230 python blocks.py --blocks llama3_8b_layer --modes inference train --rounds 3 --random-embeds \
  --backends default norm_fusion --json $OUT/llama.json > $OUT/llama.log 2>&1
tail -3 $OUT/dynamic.log; head -12 $OUT/epilogue_host.log; grep -h "^|\|host ms\|compile s" $OUT/towers.log $OUT/llama.log
