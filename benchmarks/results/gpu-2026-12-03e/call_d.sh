# Triton alone, current defaults: the Llama-3-8B and Qwen3-1.7B-like layers' training step with both controls
# (the last Llama run read 0.981x default with no site rewritten and no controls).
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
for block in llama3_8b_layer qwen3_1p7b_layer; do
  timeout $((560 - SECONDS)) python blocks.py --blocks $block --modes train --rounds 3 --gemm-backends triton --random-embeds \
    --backends default norm_fusion default_again norm_fusion_never --json $OUT/${block}_train.json > $OUT/${block}_train.log 2>&1
  grep -h "^|\|controls\|compile s" $OUT/${block}_train.log | cut -c1-300 | tail -4
  grep -h "site" $OUT/${block}_train.log | cut -c1-250 | sort | uniq | head -6
  tail -2 $OUT/${block}_train.log
done
