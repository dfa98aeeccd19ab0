# Forty-fourth session, first call (any H100 or H200; planned last session as 05d/call_e.sh): the
# GPU tests this session's changes did not reach, verbose (-rA) so a cut run still says which passed — the per-head
# float64 kernel cases (the tables read as halves, partial RoPE from [M, R] tables, the per-head LayerNorm with a
# weight per head), Cohere's QK-norm family, the partial-RoPE (dynamic shapes too) and gated-q pattern tests; then
# the head_dim-256 blocks' first compiles with the default tile (Gemma 3 4B, Qwen3.5), default against the plugin.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 300 python -m pytest tests/test_regrouped.py tests/test_hf_models.py -q -rA -p no:cacheprovider \
  -k "per_head_norm_and_rope_match or cohere_qk or output_gates or partial_rope" > $OUT/tests.log 2>&1
echo "== tests (rc $?, ${SECONDS} s)"; grep -c "^PASSED" $OUT/tests.log; grep -h "^FAILED\|^ERROR\|^E  " $OUT/tests.log | head -12 | cut -c1-300
cd /tmp/site/benchmarks
for block in ${BLOCKS:-gemma3_4b_layer qwen3_5_layer}; do
  left=$((570 - SECONDS)); [ $left -lt 60 ] && break
  HOME=/tmp/home_e$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_e$block TRITON_CACHE_DIR=/tmp/tri_e$block \
    timeout $((left < 190 ? left : 190)) python blocks.py --blocks $block --modes inference --rounds 2 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases > $OUT/${block}.log 2>&1
  echo "== $block (rc $?, ${SECONDS} s)"
  grep -h "^| \(qwen\|gemma\)\|compile s\|of it\|Error" $OUT/${block}.log | cut -c1-250
  grep -o "site [A-Za-z]* [a-z_]* ([0-9, ]*).\{0,330\}" $OUT/${block}.log | cut -c1-330
done
