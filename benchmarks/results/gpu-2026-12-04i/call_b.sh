# Thirty-seventh session, second call (planned, not run): measure_budget_s bounding the compile (a measurement
# starts only where one as long as the last fits). GPU tests, a compile-stage probe of the epilogue
# GEMM, then the LN tower and Llama on empty caches with Inductor's timed phases.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 150 python -m pytest tests/test_regrouped.py -q -p no:cacheprovider \
  -k "launched_from_inductor or weight_fold or folded or dynamic_batch or trained" \
  > $OUT/regrouped.log 2>&1
echo "== regrouped subset (rc $?, ${SECONDS} s)"; tail -1 $OUT/regrouped.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  " $OUT/regrouped.log | head -12 | cut -c1-300
timeout 80 python -m pytest tests/test_direct_launch.py tests/test_selection.py -q -p no:cacheprovider \
  > $OUT/selection.log 2>&1
echo "== selection tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/selection.log | cut -c1-200
grep -h "^FAILED\|^ERROR" $OUT/selection.log | head -10 | cut -c1-300
TRITON_CACHE_DIR=/tmp/tri_probe timeout 60 python benchmarks/results/gpu-2026-12-04i/compile_probe.py \
  > $OUT/compile_probe.log 2>&1
echo "== compile probe (rc $?, ${SECONDS} s)"; grep -v "Warning\|warn(" $OUT/compile_probe.log | tail -8
cd /tmp/site/benchmarks
# the LN tower twice: as a cold process meets it, and with Inductor's compile workers ready for both compilers
for spec in recsys_ln_tower:--warm-process recsys_ln_tower:--ready-workers llama3_8b_layer:--warm-process; do
  IFS=: read block warm <<< "$spec"
  left=$((570 - SECONDS)); [ $left -lt 40 ] && break
  run=$block$warm
  HOME=/tmp/home_b$run TORCHINDUCTOR_CACHE_DIR=/tmp/ind_b$run TRITON_CACHE_DIR=/tmp/tri_b$run \
    timeout $((left < 120 ? left : 120)) python blocks.py --blocks $block --modes inference --rounds 2 $warm \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases > $OUT/${run}.log 2>&1
  rc=$?; block=$run
  echo "== $block (rc $rc, ${SECONDS} s)"
  grep -h "^| \(recsys\|llama\)\|compile s\|of it" $OUT/${block}.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}.log | cut -c1-220
  sed -n '/compile phases/,$p' $OUT/${block}.log | grep "compile phases\|compile_inner\|joint_custom\|precompile\|async_compile.wait\|GraphLowering.run\|load_by_key" | head -8
  echo "   cubins:"; find /tmp/tri_b$run -name '*.cubin' -printf '%f\n' | sort | uniq -c | sort -rn | grep "epilogue\|fold"
done
