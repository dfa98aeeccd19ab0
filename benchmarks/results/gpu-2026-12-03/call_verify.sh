# After an unpack: the towers and the Qwen3 layer in inference with op calls priced with their host time.
source .cute/b/install.sh >/dev/null 2>&1 || exit 3
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
timeout 170 python blocks.py --blocks recsys_rms_tower recsys_ln_tower --modes inference --rounds 3 \
  --backends default norm_fusion --host --json $OUT/towers.json > $OUT/towers.log 2>&1
timeout 150 python blocks.py --blocks qwen3_1p7b_layer --modes inference --rounds 3 --random-embeds \
  --backends default norm_fusion --host --json $OUT/qwen3.json > $OUT/qwen3.log 2>&1
grep -h "^|\|host ms\|compile s" $OUT/towers.log $OUT/qwen3.log
