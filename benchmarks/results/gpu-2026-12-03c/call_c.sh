# After `bash benchmarks/quack_round.sh unpack` (carry .cute/a); this call carries .cute/b.
# 1. The cached-launch GPU test and the op's opcheck (the op declared without custom_op's layers).
# 2. What each epilogue piece costs on the Triton kernel at the towers' consumer shapes.
# 3. The recsys towers in inference with controls (default compiled twice, the plugin with policy never).
source .cute/b/install.sh >/dev/null 2>&1 || exit 3
source benchmarks/device_setup.sh
cd /tmp/site
timeout 80 python -m pytest tests/test_regrouped.py -q -p no:warnings -k "cached_launches or opcheck or tuning_compiles" 2>&1 | tail -4 > $OUT/tests.log
cat $OUT/tests.log
timeout 120 python benchmarks/diagnostics/epilogue_configs.py --pieces 131072x512x1024 262144x256x1024 > $OUT/pieces.log 2>&1
grep -v "^  (" $OUT/pieces.log
cd benchmarks
timeout 330 python blocks.py --blocks recsys_rms_tower recsys_ln_tower --modes inference --rounds 3 \
  --backends default norm_fusion default_again norm_fusion_never --json $OUT/towers.json > $OUT/towers.log 2>&1
grep -h "^|\|controls\|compile s" $OUT/towers.log | head -20
