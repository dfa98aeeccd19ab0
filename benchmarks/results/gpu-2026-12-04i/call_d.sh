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
