# Issue 25: the towers' training step under CUDA graphs with both backends (call_c again: its copy of the tree was
# caught mid-edit); after call_f unpacked the Quack kit (carry .cute/b).
LIMIT=480 BACKENDS="default norm_fusion norm_fusion_triton" \
  BLOCK_ARGS="--modes train --mode reduce-overhead" bash benchmarks/quack_round.sh towers
