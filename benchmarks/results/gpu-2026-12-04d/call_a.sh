# Issue 27: where the towers' first compile goes, by the pass's own phase clock (report.clocked), Triton alone.
# Per tower: cold (fresh HOME, Inductor and Triton caches), then a new process with the plugin's caches warm
# (patterns, choices) but Inductor's and Triton's cold: what a second model of the same shapes pays.
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
OUT=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for block in recsys_rms_tower recsys_ln_tower; do
  for run in cold plugin_warm; do
    [ $run = cold ] && rm -rf /tmp/home_$block
    HOME=/tmp/home_$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_${block}_$run TRITON_CACHE_DIR=/tmp/tri_${block}_$run \
      NORM_FUSION_LOG=1 timeout 150 python blocks.py --blocks $block --modes inference --rounds 1 \
      --backends default norm_fusion --gemm-backends triton --json $OUT/${block}_$run.json > $OUT/${block}_$run.log 2>&1
    echo "== $block $run"
    grep -h "compile s\|of it\|stage:" $OUT/${block}_$run.log | cut -c1-250
    grep -h "REWRITTEN\|not rewritten" $OUT/${block}_$run.log | cut -c1-160 | head -6
  done
done
