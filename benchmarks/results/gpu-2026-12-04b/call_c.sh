# FAILED: the tree was copied while patterns/pre_norm.py was being edited (SyntaxError); call_g repeats its towers part.
# Issue 25: the towers' training step under CUDA graphs with both backends; then the GPU tests through the
# pre-norm families after the patterns restructure (gpu-2026-12-04/call_f.sh, not run there).
LIMIT=400 BACKENDS="default norm_fusion norm_fusion_triton" \
  BLOCK_ARGS="--modes train --mode reduce-overhead" bash benchmarks/quack_round.sh towers
source benchmarks/device_setup.sh
cd /tmp/site
timeout 90 python -m pytest tests/test_gpu.py -q -p no:warnings -x -k "end_to_end_training or scaled_norm_folded or models_rewritten" 2>&1 | tail -6 | tee ${OUT:-/tmp/out}/tests_prenorm.log
