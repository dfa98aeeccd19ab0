# 1. The Inductor bug: which of the block's forms (3-D SDPA, RoPE's table computed in the graph) the tensors need.
# 2. The Llama-3-8B layer in inference with the new default fusions (no in-loop prologues): first compile (issue 27).
source benchmarks/device_setup.sh
cd /tmp/site
D=benchmarks/results/gpu-2026-12-04
F="Warning\|warnings.warn\|Online softmax\|split the reduction\|important use case\|softmax\.$"
TORCHINDUCTOR_CACHE_DIR=/tmp/ic_min timeout 110 python $D/inductor_repro_min.py 2>&1 | grep -v "$F" | tee $OUT/inductor_repro_min.log | cut -c1-220
cd benchmarks
timeout $((440 - SECONDS)) python blocks.py --blocks llama3_8b_layer --modes inference --rounds 3 --gemm-backends triton --random-embeds \
  --backends default norm_fusion --json $OUT/llama_inference.json > $OUT/llama_inference.log 2>&1
grep -h "^|\|controls\|compile s" $OUT/llama_inference.log | cut -c1-300 | tail -4
grep -h "site" $OUT/llama_inference.log | cut -c1-250 | sort | uniq | head -6
