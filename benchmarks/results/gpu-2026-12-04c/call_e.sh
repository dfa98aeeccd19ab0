# Issue 27 with the Quack kit (carry .cute/b, right after call_d): the recsys towers' first compile in inference
# under CUDA graphs with the Quack JIT budget (quack_jit_budget_s=5, the default), cold caches (a fresh machine),
# default and the plugin with both backends; then the same in a new process on the same caches: the sites the
# budget left are pending, so Inductor's FX graph cache misses and the pass times Quack there.
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT/first $OUT/second
OUT=$OUT/first LIMIT=280 BACKENDS="default norm_fusion" BLOCK_ARGS="--modes inference --mode reduce-overhead" \
  bash benchmarks/quack_round.sh towers > /dev/null 2>&1
grep -h "^|\|compile s\|site" $OUT/first/blocks_towers.log | cut -c1-420
OUT=$OUT/second LIMIT=$((585 - SECONDS)) BACKENDS="default norm_fusion" BLOCK_ARGS="--modes inference --mode reduce-overhead" \
  bash benchmarks/quack_round.sh towers > /dev/null 2>&1
grep -h "^|\|compile s\|site" $OUT/second/blocks_towers.log | cut -c1-420
