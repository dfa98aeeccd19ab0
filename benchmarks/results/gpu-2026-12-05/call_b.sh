# Thirty-ninth session, second call: the decoder blocks with QK-norm + RoPE (RoPE's default tile, the budget
# rule) and the Gemma 4 layer (its forms matched since this session), each on empty caches.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
cd /tmp/site/benchmarks
for block in gemma4_layer qwen3_1p7b_layer gemma3_4b_layer; do
  left=$((570 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_b$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_b$block TRITON_CACHE_DIR=/tmp/tri_b$block \
    timeout $((left < 170 ? left : 170)) python blocks.py --blocks $block --modes inference --rounds 3 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases > $OUT/${block}.log 2>&1
  echo "== $block (rc $?, ${SECONDS} s)"
  grep -h "^| \(qwen\|gemma\)\|compile s\|of it\|Error" $OUT/${block}.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}.log | cut -c1-260
  echo "   cubins:"; find /tmp/tri_b$block -name '*.cubin' -printf '%f\n' | sed 's/\.cubin//' | sort | uniq -c | sort -rn | grep "epilogue\|fold"
done
