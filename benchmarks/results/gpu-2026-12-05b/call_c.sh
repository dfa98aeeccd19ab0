# Forty-first session, third call, on the H100 (name nvidia-h100-x1): with the committed H100 table (call_b's
# calibration), the blocks' first compiles and step times, and their selections' logged reasons (measured against
# the cost model's prediction) as H100 records the fit did not see.
# First the GPU tests of the interleaved RoPE (ROPE_INTERLEAVED), of RoPE computed in fp32 (Cohere's) and of
# Llama 4's complex-number RoPE, written after the device paused (the RoPE tests' compiles took ~6 min for 28 on
# the H200: they get 400 s). call_d: BLOCKS="recsys_ln_tower gemma3_4b_layer" SKIP_TESTS=1 bash call_c.sh.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
[ -z "$SKIP_TESTS" ] && timeout 400 python -m pytest tests/test_regrouped.py tests/test_hf_models.py -q -p no:cacheprovider \
  -k "per_head_norm_and_rope_match or rope_written or rope_computed_in_fp32 or bf16 or qk_norm_after_rope or llama4 or partial_rope or glm4" \
  > $OUT/interleaved.log 2>&1
echo "== interleaved RoPE tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/interleaved.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  " $OUT/interleaved.log | head -12 | cut -c1-300
cd /tmp/site/benchmarks
for block in ${BLOCKS:-qwen3_1p7b_layer}; do
  left=$((570 - SECONDS)); [ $left -lt 60 ] && break
  HOME=/tmp/home_c$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_c$block TRITON_CACHE_DIR=/tmp/tri_c$block \
    timeout $((left < 190 ? left : 190)) python blocks.py --blocks $block --modes inference --rounds 2 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases > $OUT/${block}.log 2>&1
  echo "== $block (rc $?, ${SECONDS} s)"
  grep -h "^| \(qwen\|gemma\|recsys\)\|compile s\|of it\|Error" $OUT/${block}.log | cut -c1-250
  grep -o "site [A-Za-z]* [a-z_]* ([0-9, ]*).\{0,330\}" $OUT/${block}.log | cut -c1-330
done
