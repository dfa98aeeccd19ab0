# After Quack is imported only where it would be compiled (carry .cute/b, right after call_h): the towers' first
# compile (cold caches) with the kit installed, then the Qwen3-1.7B-like layer's (cold: its own caches).
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT/towers $OUT/qwen3
OUT=$OUT/towers LIMIT=200 BACKENDS="default norm_fusion" BLOCK_ARGS="--modes inference --mode reduce-overhead" \
  bash benchmarks/quack_round.sh towers > /dev/null 2>&1
grep -h "^| recsys\|compile s" $OUT/towers/blocks_towers.log | cut -c1-200
grep -ho "Quack [a-z ]*budget[^)]*)\|quack [0-9.]* ms\|quack: [^;)]*" $OUT/towers/blocks_towers.log | sort | uniq -c | cut -c1-200
HOME=/tmp/home_q TORCHINDUCTOR_CACHE_DIR=/tmp/inductor_q TRITON_CACHE_DIR=/tmp/triton_q OUT=$OUT/qwen3 LIMIT=$((570 - SECONDS)) \
  BLOCKS=qwen3_1p7b_layer BACKENDS="default norm_fusion" BLOCK_ARGS="--modes inference --random-embeds" \
  bash benchmarks/quack_round.sh llama > /dev/null 2>&1
grep -h "^| qwen3\|compile s" $OUT/qwen3/blocks_llama.log | cut -c1-200
grep -ho "quack not offered ([^)]*)\|quack [0-9.]* ms\|quack: [^;)]*" $OUT/qwen3/blocks_llama.log | sort | uniq -c | cut -c1-200
