# Issue 25: the recsys towers in inference under CUDA graphs (reduce-overhead), the plugin with Triton and Quack
# beside the plugin with Triton alone, default and default compiled again (carry .cute/b, after call_a).
LIMIT=560 BACKENDS="default norm_fusion norm_fusion_triton default_again" \
  BLOCK_ARGS="--modes inference --mode reduce-overhead" bash benchmarks/quack_round.sh towers
