# Issue 26: a Gemma3-4B-sized layer (per-head (1 + w) QK-norm at head_dim 256, rotate-half RoPE, sliding window),
# inference with per-kernel GPU times (how much of default's q/k norm + RoPE time the plugin hides), then training.
# First, issue 27: the GPT-2 block's first compile with cold caches (left out on 12-04 for time).
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
(HOME=/tmp/home_g2 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor_g2 TRITON_CACHE_DIR=/tmp/triton_g2 timeout 110 \
    python blocks.py --blocks gpt2_medium_layer --modes inference --rounds 1 --random-embeds --backends default norm_fusion \
    --json $OUT/compile_gpt2_cold.json 2>&1 | grep -v "Warning\|warn" | grep "^|\|compile s\|site\|Error" | cut -c1-400 | tee $OUT/compile_gpt2.log)
run gemma3_4b_layer --profile inference
run gemma3_4b_layer "" train
