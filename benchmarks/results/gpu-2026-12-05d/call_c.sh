# Forty-third session, third call (H100, nvidia-h100-x1): the RoPE tables read as two halves (tables [M, rope_dim]
# for a partial rotary): the pieces and the kernel before the change timed side by side at Qwen3-Next's gated q,
# Gemma 3 4B's q and Qwen3-8B's q, at the offered tile, its flattened loop and 64x256; then the per-head GPU tests
# (float64 kernel cases, now with heads of 256) and the kernel fuzz (60 s).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
VARIANTS=shipped,before,const python benchmarks/results/gpu-2026-12-05d/head256_probe.py "128x256x64 s3" \
  "128x256x64 s3 flat" "64x256x64 s4" > $OUT/halves_probe.log 2>&1
echo "== probe (rc $?, ${SECONDS} s)"; grep -v "Warning\|warn(" $OUT/halves_probe.log | cut -c1-200
timeout 200 python -m pytest tests/test_regrouped.py tests/test_hf_models.py -q -p no:cacheprovider \
  -k "per_head_norm_and_rope_match or partial_rope or output_gates or glm4_moe or qwen3_5" > $OUT/tests.log 2>&1
echo "== tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/tests.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  " $OUT/tests.log | head -12 | cut -c1-300
python tests/fuzz_regrouped.py --cases 600 --workers 12 --time-limit 60 --seed 4301 > $OUT/fuzz.log 2>&1
echo "== kernel fuzz (rc $?, ${SECONDS} s)"; grep -v "Warning\|warn" $OUT/fuzz.log | grep -v "^ \{6\}[0-9]" | tail -6 | cut -c1-300
