# Thirty-third session, first call: the GPU tests of the selection paths added last session (the default config's
# launch-once check, the clear-win path), then the recsys towers' first compile (cold caches, warm process) with
# model_margin 1.15 and the shipped pattern traces, 3 rounds, then a new process on the same caches (the warm
# second compile; revisit_pending off: Inductor's FX graph cache serves it).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 240 python -m pytest tests/test_direct_launch.py tests/test_selection.py tests/test_quack_backend.py \
  tests/test_regrouped.py -q -x -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
echo "== GPU tests (rc $?, ${SECONDS} s)"; tail -5 $OUT/gpu_tests.log | cut -c1-300
grep -h "^FAILED\|^ERROR\|Error" $OUT/gpu_tests.log | head -10 | cut -c1-300
cd /tmp/site/benchmarks
for block in recsys_rms_tower recsys_ln_tower; do
  for run in first second; do
    left=$((570 - SECONDS)); [ $left -lt 40 ] && break
    HOME=/tmp/home_a_$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_a_$block TRITON_CACHE_DIR=/tmp/tri_a_$block \
      timeout $((left < 150 ? left : 150)) python blocks.py --blocks $block --modes inference --rounds 3 --warm-process \
      --random-embeds --backends default norm_fusion --gemm-backends triton --json $OUT/${block}_$run.json > $OUT/${block}_$run.log 2>&1
    echo "== $block $run (rc $?, ${SECONDS} s)"
    grep -h "^| recsys\|compile s\|of it" $OUT/${block}_$run.log | cut -c1-250
    grep -ho "site [A-Za-z]* [a-z_]* ([0-9, ]*)\|clear win\|measure_budget_s=[0-9.]*\|producer GEMM: [^;]*" $OUT/${block}_$run.log | sort | uniq -c | cut -c1-300
  done
done
