# call_e again after the budget counts Quack's import and stops after a probe (carry .cute/b, right after call_f):
# the towers' first compile (cold caches), then a new process on the same caches; and what importing Quack costs.
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT/first $OUT/second
OUT=$OUT/first LIMIT=250 BACKENDS="default norm_fusion" BLOCK_ARGS="--modes inference --mode reduce-overhead" \
  bash benchmarks/quack_round.sh towers > /dev/null 2>&1
grep -h "^| recsys\|compile s" $OUT/first/blocks_towers.log | cut -c1-200
grep -ho "Quack [a-z ]*budget[^)]*)\|quack [0-9.]* ms" $OUT/first/blocks_towers.log | sort | uniq -c
OUT=$OUT/second LIMIT=200 BACKENDS="default norm_fusion" BLOCK_ARGS="--modes inference --mode reduce-overhead" \
  bash benchmarks/quack_round.sh towers > /dev/null 2>&1
grep -h "^| recsys\|compile s" $OUT/second/blocks_towers.log | cut -c1-200
grep -ho "Quack [a-z ]*budget[^)]*)\|quack [0-9.]* ms\|kept from an earlier compile" $OUT/second/blocks_towers.log | sort | uniq -c
(source .cute/b/install.sh >/dev/null 2>&1; python -c "
import time; t = time.perf_counter(); import quack; from quack.epilogue import frontend; print(f'import quack + frontend: {time.perf_counter() - t:.1f} s')") 2>&1 | tail -1 | tee $OUT/import_quack.txt
