# After `bash benchmarks/quack_round.sh unpack` (carry .cute/a); this call carries .cute/b.
# Controls for the runs where the plugin rewrote nothing and read 0.98x: default compiled twice, and the plugin
# with policy "never", beside default and the plugin, in one process (LN tower inference, Llama-3-8B training).
source .cute/b/install.sh >/dev/null 2>&1 || exit 3
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
timeout 100 python blocks.py --blocks recsys_ln_tower --modes inference --rounds 5 \
  --backends default norm_fusion default_again norm_fusion_never --json $OUT/ln_tower.json > $OUT/ln_tower.log 2>&1
timeout 200 python blocks.py --blocks llama3_8b_layer --modes train --rounds 3 --random-embeds \
  --backends default norm_fusion default_again norm_fusion_never --json $OUT/llama_train.json > $OUT/llama_train.log 2>&1
grep -h "^|\|controls\|compile s" $OUT/ln_tower.log $OUT/llama_train.log
