# 1. Issue 27's "no fused site slower than 0.98x": the norm -> linear pairs of 12-04's sweep with the refitted cost
#    model and the fold's kernel floor (default against the plugin, do_bench and CUDA-graph times, the decisions).
# 2. Issue 30 on the one lent GPU: benchmarks/distributed.py runs (FSDP2 per-block compile, one rank, NCCL) on the
#    Llama-3-8B-shaped layer, default and the plugin, each against the one-GPU run.
source benchmarks/device_setup.sh
cd /tmp/site
OUT=${OUT:-/tmp/out}
F="Warning\|warnings.warn\|_warn_once"
timeout 150 python benchmarks/diagnostics/profile_pair.py --no-kernels --shapes 65536x256x256 65536x512x1024 \
  65536x1024x1024 262144x256x256 262144x1024x512 262144x2048x256 2>&1 | grep -v "$F" > $OUT/pairs_rms.log
grep -E "norm_fusion:|/ default|: do_bench" $OUT/pairs_rms.log | cut -c1-170
timeout 90 python benchmarks/diagnostics/profile_pair.py --no-kernels --norm ln --shapes 65536x1024x1024 \
  262144x1024x512 2>&1 | grep -v "$F" > $OUT/pairs_ln.log
grep -E "norm_fusion:|/ default|: do_bench" $OUT/pairs_ln.log | cut -c1-170
timeout $((590 - SECONDS)) python benchmarks/distributed.py --block llama3_8b_layer --parallelism fsdp2 --gpus 1 \
  --steps 30 --gemm-backends triton --json $OUT/distributed_llama_fsdp2.json 2>&1 | grep -v "$F" > $OUT/distributed.log
grep -v "^\s*$" $OUT/distributed.log | cut -c1-300 | tail -14
