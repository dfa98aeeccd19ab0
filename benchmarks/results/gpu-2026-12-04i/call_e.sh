# Thirty-ninth session (planned, not run: no device lent): Gemma 4's forms on the GPU (RMSNorm written with
# pow(., -0.5); QK-norm + RoPE applied before the heads' transpose), then the Gemma 4 layer against default (the
# device's transformers 5.17 has Gemma 4: checked in a CPU venv with torch 2.11.0 + transformers 5.17.0).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 240 python -m pytest tests/test_regrouped.py tests/test_hf_models.py -q -p no:cacheprovider \
  -k "rope_written or gemma4 or qk_norm_and_rope" > $OUT/gemma4_tests.log 2>&1
echo "== Gemma 4 forms, GPU tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/gemma4_tests.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  " $OUT/gemma4_tests.log | head -12 | cut -c1-300
cd /tmp/site/benchmarks
left=$((570 - SECONDS))
HOME=/tmp/home_e TORCHINDUCTOR_CACHE_DIR=/tmp/ind_e TRITON_CACHE_DIR=/tmp/tri_e \
  timeout $((left < 200 ? left : 200)) python blocks.py --blocks gemma4_layer --modes inference --rounds 3 \
  --warm-process --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases \
  > $OUT/gemma4_layer.log 2>&1
echo "== gemma4_layer (rc $?, ${SECONDS} s)"
grep -h "^| gemma\|compile s\|of it\|Error" $OUT/gemma4_layer.log | cut -c1-250
grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/gemma4_layer.log | cut -c1-220
