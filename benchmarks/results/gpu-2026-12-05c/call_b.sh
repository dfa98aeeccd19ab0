# Forty-second session, second call (H100, nvidia-h100-x1): the GPU tests call_a's 240 s did not reach (the gated
# q's, GLM-4.5's and Qwen3.5's families) and the earlier sessions' interleaved / complex / fp32 RoPE ones (planned
# in 05b call_c); then the qwen3_5_layer block (gated q, head_dim 256, RoPE over 64), default against the plugin.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 300 python -m pytest tests/test_regrouped.py tests/test_hf_models.py -q -p no:cacheprovider \
  -k "output_gates or glm4_moe or qwen3_5 or rope_written or rope_computed_in_fp32 or qk_norm_after_rope or llama4" \
  > $OUT/tests.log 2>&1
echo "== tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/tests.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  " $OUT/tests.log | head -12 | cut -c1-300
cd /tmp/site/benchmarks
left=$((580 - SECONDS))
HOME=/tmp/home_q TORCHINDUCTOR_CACHE_DIR=/tmp/ind_q TRITON_CACHE_DIR=/tmp/tri_q \
  timeout $((left < 250 ? left : 250)) python blocks.py --blocks qwen3_5_layer --modes inference --rounds 2 \
  --warm-process --random-embeds --backends default norm_fusion --gemm-backends triton > $OUT/qwen3_5_layer.log 2>&1
echo "== qwen3_5_layer (rc $?, ${SECONDS} s)"
grep -h "^| qwen\|compile s\|of it\|Error" $OUT/qwen3_5_layer.log | cut -c1-250
grep -o "site [A-Za-z]* [a-z_]* ([0-9, ]*).\{0,330\}" $OUT/qwen3_5_layer.log | cut -c1-330
