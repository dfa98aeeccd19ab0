# After `bash benchmarks/quack_round.sh unpack` (carry .cute/a); this call carries .cute/b.
# Controls for the runs where the plugin rewrote nothing and read 0.98x: default compiled twice, and the plugin
# with policy "never", beside default and the plugin, in one process (the Llama-3-8B layer, inference); its
# first compile with Quack's probe config (was 88.7 s, 42 s of it Quack's JIT).
source .cute/b/install.sh >/dev/null 2>&1 || exit 3
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
timeout 170 python blocks.py --blocks llama3_8b_layer --modes inference --rounds 3 --random-embeds \
  --backends default norm_fusion default_again norm_fusion_never --json $OUT/llama.json > $OUT/llama.log 2>&1
grep -h "^|\|controls\|compile s" $OUT/llama.log
