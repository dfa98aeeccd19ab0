# After `bash benchmarks/quack_round.sh unpack` (carry .cute/a); this call carries .cute/b.
# 1. The training QK-norm rewrite on real families (Gemma3, Qwen3 config, tiny) on the GPU, against float64.
# 2. Controls on the Llama-3-8B layer (inference): default compiled twice and the plugin with policy never beside
#    default and the plugin, in one process; its first compile with Quack's probe config (was 88.7 s).
source .cute/b/install.sh >/dev/null 2>&1 || exit 3
source benchmarks/device_setup.sh
cd /tmp/site
timeout 150 python -m pytest tests/test_regrouped.py -q -x -p no:warnings -k qk_norm_and_rope 2>&1 | tail -8 > $OUT/qk_tests.log
cat $OUT/qk_tests.log
cd benchmarks
timeout 300 python blocks.py --blocks llama3_8b_layer --modes inference --rounds 3 --random-embeds \
  --backends default norm_fusion default_again norm_fusion_never --json $OUT/llama.json > $OUT/llama.log 2>&1
grep -h "^|\|controls\|compile s" $OUT/llama.log | head -40
tail -3 $OUT/llama.log
