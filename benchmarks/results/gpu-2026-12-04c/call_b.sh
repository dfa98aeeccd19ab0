# Issue 26: a Gemma3-4B-sized layer (per-head (1 + w) QK-norm at head_dim 256, rotate-half RoPE, sliding window),
# inference with per-kernel GPU times (how much of default's q/k norm + RoPE time the plugin hides), then training.
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
run() {  # block extra-args modes...
  local block=$1 extra=$2; shift 2
  timeout $((585 - SECONDS)) python blocks.py --blocks $block --modes "$@" --rounds 3 --gemm-backends triton --random-embeds \
    --backends default norm_fusion norm_fusion_never $extra --json $OUT/${block}_$1.json > $OUT/${block}_$1.log 2>&1
  grep -h "^|\|controls\|compile s" $OUT/${block}_$1.log | cut -c1-300 | tail -6
  grep -h "site" $OUT/${block}_$1.log | cut -c1-400 | sort | uniq | head -12
  tail -2 $OUT/${block}_$1.log | cut -c1-300
}
run gemma3_4b_layer --profile inference
run gemma3_4b_layer "" train
