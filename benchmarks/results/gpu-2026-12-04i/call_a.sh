# Thirty-seventh session, first call: where the first compile's seconds go (Inductor's timed phases, both
# compilers), whether Inductor's compile of the epilogue GEMM finds Triton's cache (cubins per kernel name), and
# the decoder blocks with min_direct_saving_ms in place. LN tower twice: empty caches, then empty Inductor cache
# and HOME but the first run's Triton cache.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
cd /tmp/site/benchmarks
for spec in recsys_ln_tower:a:a recsys_ln_tower:b:a llama3_8b_layer:a:a qwen3_1p7b_layer:a:a gemma3_4b_layer:a:a; do
  IFS=: read block run tri <<< "$spec"
  left=$((560 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_$block$run TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$block$run TRITON_CACHE_DIR=/tmp/tri_$block$tri \
    timeout $((left < 120 ? left : 120)) python blocks.py --blocks $block --modes inference --rounds 2 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases \
    > $OUT/${block}_$run.log 2>&1
  echo "== $block $run (rc $?, ${SECONDS} s)"
  grep -h "^| \(recsys\|qwen\|llama\|gemma\)\|compile s\|of it" $OUT/${block}_$run.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}_$run.log | grep -v qk_norm | cut -c1-150
  sed -n '/compile phases/,/^  [a-z]/p' $OUT/${block}_$run.log | head -24
  echo "   cubins by kernel name:"; find /tmp/tri_$block$tri -name '*.cubin' -printf '%f\n' | sort | uniq -c | sort -rn | head -8
done
