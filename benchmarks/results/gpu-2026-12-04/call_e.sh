# The recsys towers' training step with the new default fusions (the in-loop prologues took both towers' sites on
# 2026-12-02 and the step ran 0.984x): default against the plugin, first compile of each.
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
timeout 200 python blocks.py --blocks recsys_rms_tower recsys_ln_tower --modes train --rounds 3 --gemm-backends triton \
  --backends default norm_fusion --json $OUT/towers_train.json > $OUT/towers_train.log 2>&1
grep -h "^|\|compile s" $OUT/towers_train.log | cut -c1-300 | tail -6
grep -h "site" $OUT/towers_train.log | cut -c1-250 | sort | uniq | head -6
