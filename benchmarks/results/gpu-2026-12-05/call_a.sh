# Thirty-ninth session, first call: the GPU tests of this session's changes (RoPE's default tile, RoPE before
# the heads' transpose), every config at two RoPE sites (checks the default), then Llama-3-8B (budget rule +
# RoPE default) and the LN tower (workers ready) on empty caches.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 150 python -m pytest tests/test_regrouped.py -q -p no:cacheprovider \
  -k "launched_from_inductor or rope_written or qk_norm_and_rope or per_head_norm" > $OUT/regrouped.log 2>&1
echo "== regrouped subset (rc $?, ${SECONDS} s)"; tail -1 $OUT/regrouped.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  " $OUT/regrouped.log | head -12 | cut -c1-300
timeout 150 python benchmarks/diagnostics/epilogue_configs.py --grid --rounds 3 --json $OUT/rope_configs.json \
  --sites per_head:16384x4096x4096:rope=1:head_norm=0 per_head:8192x2048x2048:rope=1 > $OUT/rope_configs.log 2>&1
echo "== rope configs (rc $?, ${SECONDS} s)"; grep -v "Warning\|warn(" $OUT/rope_configs.log | tail -24
cd /tmp/site/benchmarks
for spec in llama3_8b_layer:--warm-process recsys_ln_tower:--ready-workers; do
  IFS=: read block warm <<< "$spec"
  left=$((570 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_a$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_a$block TRITON_CACHE_DIR=/tmp/tri_a$block \
    timeout $((left < 130 ? left : 130)) python blocks.py --blocks $block --modes inference --rounds 2 $warm \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases > $OUT/${block}.log 2>&1
  echo "== $block $warm (rc $?, ${SECONDS} s)"
  grep -h "^| \(recsys\|llama\)\|compile s\|of it" $OUT/${block}.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}.log | cut -c1-260
  sed -n '/compile phases/,$p' $OUT/${block}.log | grep "compile phases\|compile_inner\|joint_custom\|precompile\|async_compile.wait\|GraphLowering.run" | head -8
  echo "   cubins:"; find /tmp/tri_a$block -name '*.cubin' -printf '%f\n' | sed 's/\.cubin//' | sort | uniq -c | sort -rn | grep "epilogue\|fold"
done
