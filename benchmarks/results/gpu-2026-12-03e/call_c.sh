# Triton alone, the current defaults (one-MUFU activations, the residual read after the k-loop, two-segment
# statistics tiles). 1. The recsys towers' training step with controls (never measured with these defaults).
# 2. The Qwen3-1.7B-like layer in inference with controls, with what time is left.
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
timeout 380 python blocks.py --blocks recsys_rms_tower recsys_ln_tower --modes train --rounds 3 --gemm-backends triton \
  --backends default norm_fusion default_again norm_fusion_never --json $OUT/towers_train.json > $OUT/towers_train.log 2>&1
grep -h "^|\|controls\|compile s\|site" $OUT/towers_train.log | cut -c1-400 | head -40
tail -3 $OUT/towers_train.log
timeout $((560 - SECONDS)) python blocks.py --blocks qwen3_1p7b_layer --modes inference --rounds 3 --gemm-backends triton \
  --random-embeds --backends default norm_fusion default_again norm_fusion_never --json $OUT/qwen3_inference.json > $OUT/qwen3_inference.log 2>&1
grep -h "^|\|controls\|compile s\|site" $OUT/qwen3_inference.log | cut -c1-300 | head -20
tail -3 $OUT/qwen3_inference.log
