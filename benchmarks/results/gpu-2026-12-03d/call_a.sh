# Triton alone (no Quack kit). 1. The GPU tests of the one-MUFU activations, GELU and the cached launches.
# 2. Each epilogue piece's cost; beside it the one-MUFU activations and the residual read after the k-loop.
# 3. The recsys towers in inference with tuning.epilogue_fast_sigmoid on, with controls.
source benchmarks/device_setup.sh
cd /tmp/site
timeout 90 python -m pytest tests/test_regrouped.py -q -p no:warnings -k "fast_sigmoid or gelu or cached_launches or load_after_mainloop" 2>&1 | tail -4 > $OUT/tests.log
cat $OUT/tests.log
timeout 220 python benchmarks/diagnostics/epilogue_configs.py --pieces --variant epilogue_fast_sigmoid epilogue_load_after_mainloop 131072x512x1024 262144x1024x256 > $OUT/pieces.log 2>&1
grep -v "^  (" $OUT/pieces.log | cut -c1-160
cd benchmarks
timeout 270 python blocks.py --blocks recsys_rms_tower recsys_ln_tower --modes inference --rounds 3 \
  --gemm-backends triton --tuning epilogue_fast_sigmoid=1 \
  --backends default norm_fusion default_again norm_fusion_never --json $OUT/towers_fast.json > $OUT/towers_fast.log 2>&1
grep -h "^|\|controls\|compile s\|site" $OUT/towers_fast.log | cut -c1-220 | head -30
tail -3 $OUT/towers_fast.log
