# Triton alone, current defaults: the Llama-3-8B layer (RoPE alone now in the q/k epilogue) in inference and
# training with the never-policy control, then issue 26's qwen3_8b_layer (QK-norm + RoPE) in inference.
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
run() {  # block modes...
  local block=$1; shift
  timeout $((585 - SECONDS)) python blocks.py --blocks $block --modes "$@" --rounds 3 --gemm-backends triton --random-embeds \
    --backends default norm_fusion norm_fusion_never --json $OUT/${block}_$1.json > $OUT/${block}_$1.log 2>&1
  grep -h "^|\|controls\|compile s" $OUT/${block}_$1.log | cut -c1-300 | tail -6
  grep -h "site" $OUT/${block}_$1.log | cut -c1-300 | sort | uniq | head -12
  tail -2 $OUT/${block}_$1.log | cut -c1-300
}
run llama3_8b_layer inference train
run qwen3_8b_layer inference
