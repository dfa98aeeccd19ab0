# No Quack kit on this machine (the plugin runs its Triton kernels alone). After the 16-bit erf (GELU at half the
# instructions): what each epilogue piece costs at the towers' consumer shapes, then the towers with controls.
source benchmarks/device_setup.sh
cd /tmp/site
timeout 120 python benchmarks/diagnostics/epilogue_configs.py --pieces 131072x512x1024 262144x256x1024 > $OUT/pieces.log 2>&1
grep -v "^  (" $OUT/pieces.log
timeout 60 python -m pytest tests/test_regrouped.py -q -p no:warnings -k "gelu" 2>&1 | tail -2
cd benchmarks
timeout 300 python blocks.py --blocks recsys_rms_tower recsys_ln_tower --modes inference --rounds 3 \
  --backends default norm_fusion default_again norm_fusion_never --json $OUT/towers.json > $OUT/towers.log 2>&1
grep -h "^|\|controls\|compile s\|site " $OUT/towers.log | cut -c1-700 | head -20
