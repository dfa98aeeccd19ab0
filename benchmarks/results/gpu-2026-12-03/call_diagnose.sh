# One device call after `bash benchmarks/quack_round.sh unpack` (carry .cute/a); this call carries .cute/b.
# The direct-launch tests (dynamic batch: its traceback; under CUDA graphs), the source-checkout import, the timers' agreement, and the recsys towers in inference with
# per-kernel GPU times and host ms per step (default, the plugin with both backends, the plugin with Triton alone).
source .cute/b/install.sh >/dev/null 2>&1 || exit 3
source benchmarks/device_setup.sh
cd /tmp/site
timeout 150 python -m pytest tests/test_regrouped.py tests/test_layout.py -q -p no:warnings -p no:logging --tb=short \
  -k "dynamic_batch_launched or launched_from or source_checkout" 2>&1 | grep -v "^DEBUG" | tail -80 > $OUT/dynamic.log
timeout 80 python benchmarks/timer_agreement.py > $OUT/timer.log 2>&1
cd benchmarks && timeout 370 python blocks.py --blocks recsys_rms_tower recsys_ln_tower --modes inference \
  --rounds 3 --backends default norm_fusion norm_fusion_triton --profile --host --json $OUT/towers.json \
  > $OUT/towers.log 2>&1
tail -3 $OUT/dynamic.log; cat $OUT/timer.log; grep "^|\|host ms" $OUT/towers.log
