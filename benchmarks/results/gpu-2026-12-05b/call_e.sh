# Forty-second session's call (planned; any H100 or H200, name the card): the partial rotary over halves
# (ROPE_DIM: each group of R columns of a head rotated over its own halves) and the q projection with output gates
# between its heads (HEAD_GATES: Qwen3-Next's, Qwen3.5's) on the GPU, then the RoPE forms' epilogue GEMMs timed
# side by side, every config, against cuBLAS: rotate-half, interleaved (ROPE_INTERLEAVED) and partial over halves
# (rope_dim 64 of 128: GLM-4.5's), RoPE alone at Llama-3-8B's q projection and QK-norm + RoPE at GLM-4.5-Air's
# (96 heads of 128); Qwen3-Next-80B's q projection (16 heads of 256 and their gates, RoPE over 64). The tests'
# compiles need ~15 s each on the GPU.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 240 python -m pytest tests/test_regrouped.py tests/test_hf_models.py -q -p no:cacheprovider \
  -k "per_head_norm_and_rope_match or partial_rope or output_gates or glm4_moe or qwen3_5" > $OUT/rope_forms_tests.log 2>&1
echo "== partial RoPE / output gates tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/rope_forms_tests.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  " $OUT/rope_forms_tests.log | head -12 | cut -c1-300
timeout 320 python benchmarks/diagnostics/epilogue_configs.py --grid --rounds 3 --json $OUT/rope_forms.json \
  --sites per_head:16384x4096x4096:rope=1:head_norm=0 per_head:16384x4096x4096:rope=1:head_norm=0:rope_interleaved=1 \
  per_head:16384x4096x4096:rope=1:head_norm=0:rope_dim=64 per_head:16384x4096x12288:rope=1 \
  per_head:16384x4096x12288:rope=1:rope_dim=64 per_head:16384x2048x8192:rope=1:head_dim=256:rope_dim=64 \
  per_head:16384x2048x8192:rope=1:head_dim=256:rope_dim=64:head_gates=1 > $OUT/rope_forms.log 2>&1
echo "== RoPE forms, every config (rc $?, ${SECONDS} s)"; grep -v "Warning\|warn(" $OUT/rope_forms.log | \
  grep -A3 "^per_head\|^#" | cut -c1-200
