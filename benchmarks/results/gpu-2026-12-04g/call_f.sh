# Thirty-fifth session, sixth call: the code as shipped, first compiles (cold caches, warm process) of the
# decoder blocks with the survey (compile_threads 8, the default) and without (0); Gemma3 with the default.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
cd /tmp/site/benchmarks
for spec in llama3_8b_layer:8 llama3_8b_layer:0 qwen3_1p7b_layer:8 qwen3_1p7b_layer:0 gemma3_4b_layer:8; do
  IFS=: read block threads <<< "$spec"
  left=$((540 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_f$block$threads TORCHINDUCTOR_CACHE_DIR=/tmp/ind_f$block$threads TRITON_CACHE_DIR=/tmp/tri_f$block$threads \
    timeout $((left < 110 ? left : 110)) python blocks.py --blocks $block --modes inference --rounds 1 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-threads $threads \
    > $OUT/${block}_t$threads.log 2>&1
  echo "== $block first, threads $threads (rc $?, ${SECONDS} s)"
  grep -h "^| \(qwen\|llama\|gemma\)\|compile s\|of it" $OUT/${block}_t$threads.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}_t$threads.log | grep -v qk_norm | cut -c1-150
done
