# Forty-fourth session, third call (H100, warm): the per-head GPU tests call_a's limit cut (its 29 dots were the
# first 29 float64 kernel cases), verbose; then Command R+'s layer with controls (call_b: 1.077x with 0 sites).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 270 python -m pytest tests/test_regrouped.py tests/test_hf_models.py -v -p no:cacheprovider \
  -k "layer_norm_eps_tensor or partial_rope or output_gates or cohere_qk" > $OUT/tests.log 2>&1
echo "== tests (rc $?, ${SECONDS} s)"; grep -c " PASSED" $OUT/tests.log; grep -h " FAILED\| ERROR\|^E  " $OUT/tests.log | head -12 | cut -c1-300
cd /tmp/site/benchmarks
left=$((560 - SECONDS))
HOME=/tmp/home_c TORCHINDUCTOR_CACHE_DIR=/tmp/ind_c TRITON_CACHE_DIR=/tmp/tri_c timeout $left python blocks.py \
  --blocks command_r_plus_layer --modes inference --rounds 3 --random-embeds \
  --backends default norm_fusion default_again norm_fusion_never --gemm-backends triton > $OUT/command_r_plus.log 2>&1
echo "== command_r_plus controls (rc $?, ${SECONDS} s)"; grep -h "^| [a-z]\|Error" $OUT/command_r_plus.log | cut -c1-300
