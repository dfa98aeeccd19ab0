# Thirty-eighth session (planned, not run: no device lent): where the LN tower's lowering spends its extra 0.6 s
# (GraphLowering.run 0.72 / 0.10 s in call_a). Offline, torch's identify_accessed_tensors (the TTIR of one
# epilogue-GEMM launch) took 0.09-0.16 s per call on the 2-core CPU; count its calls and seconds in a real compile.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
cd /tmp/site/benchmarks
HOME=/tmp/home_d TORCHINDUCTOR_CACHE_DIR=/tmp/ind_d TRITON_CACHE_DIR=/tmp/tri_d \
  timeout 200 python blocks.py --blocks recsys_ln_tower --modes inference --rounds 1 --warm-process --ready-workers \
  --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases --compile-profile \
  --json $OUT/ln_tower_profile.json > $OUT/ln_tower_profile.log 2>&1
echo "== LN tower, profiled (rc $?, ${SECONDS} s)"
grep -h "compile s\|of it" $OUT/ln_tower_profile.log
grep -h "generate_ttir\|identify_accessed_tensors\|get_mutated_tensors\|GraphLowering.run\|precompile" \
  $OUT/ln_tower_profile.log | head -12 | cut -c1-200
# a user's first compile: one compiler per fresh process, empty caches (blocks.py compiles both in one process,
# default first, so the plugin finds the compile workers started); TORCH_WARM_POOL=0 is the plugin's backend as
# it was before it warmed Inductor's workers like Inductor's own backend
cd /tmp/site
for spec in recsys_ln_tower:1 recsys_ln_tower:0 llama3_8b_layer:1; do
  IFS=: read block warm <<< "$spec"
  left=$((570 - SECONDS)); [ $left -lt 60 ] && break
  timeout $left python benchmarks/diagnostics/cold_compile.py --blocks $block --repeats 2 --warm-pool $warm \
    > $OUT/cold_${block}_$warm.log 2>&1
  echo "== cold $block TORCH_WARM_POOL=$warm (rc $?, ${SECONDS} s)"; tail -1 $OUT/cold_${block}_$warm.log | cut -c1-200
done
