# Forty-first session, second call, on an H100 (named nvidia-h100-x1): the cost model's constants for
# "NVIDIA H100 80GB HBM3", which has no committed table (issue 27: tables for other GPU models come from
# `python -m norm_fusion_inductor calibrate`): the full grid (27 sites), Triton alone (no Quack kit). Then the
# Llama-3-8B layer's first compile and step time with that file in the cache folder, so its selection's logged
# reasons test the fitted constants on a block they were not fitted on. First the GPU tests of HunYuan's weighted
# QK-norm after RoPE (γ folded into the tables).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 150 python -m pytest tests/test_regrouped.py tests/test_hf_models.py -q -p no:cacheprovider -rs \
  -k "qk_norm_after_rope or hunyuan" > $OUT/hunyuan.log 2>&1
echo "== hunyuan tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/hunyuan.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  \|^SKIPPED" $OUT/hunyuan.log | head -12 | cut -c1-300
timeout $((565 - SECONDS)) python -m norm_fusion_inductor calibrate --backends triton --out $OUT/calibration_h100.json \
  > $OUT/calibrate.log 2>&1
echo "== calibrate (rc $?, ${SECONDS} s)"; tail -45 $OUT/calibrate.log | cut -c1-220
cd /tmp/site/benchmarks
for block in llama3_8b_layer; do
  left=$((570 - SECONDS)); [ $left -lt 60 ] && break
  [ -f $OUT/calibration_h100.json ] && mkdir -p /tmp/home_$block/.cache/norm_fusion_inductor/calibration && \
    cp $OUT/calibration_h100.json "/tmp/home_$block/.cache/norm_fusion_inductor/calibration/NVIDIA_H100_80GB_HBM3.json"
  HOME=/tmp/home_$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$block TRITON_CACHE_DIR=/tmp/tri_$block \
    timeout $left python blocks.py --blocks $block --modes inference --rounds 2 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases > $OUT/${block}.log 2>&1
  echo "== $block (rc $?, ${SECONDS} s)"
  grep -h "^| llama\|compile s\|of it\|Error" $OUT/${block}.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)\|predicted\|epilogue GEMM on" $OUT/${block}.log | cut -c1-300 | head -12
done
