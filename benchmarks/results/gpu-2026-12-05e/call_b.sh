# Forty-fourth session, second call (any H100 or H200; name the card): issue 27's first compile for the tested
# families not yet timed at real sizes — GLM-4-9B, OLMo-2-7B, Gemma-2-9B, HunYuan-7B-like, Command R+ layers
# (benchmarks/blocks.py) — default against the plugin, each block in a new process with empty caches, warm process.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
nvidia-smi --query-gpu=name --format=csv,noheader
cd /tmp/site/benchmarks
for block in ${BLOCKS:-glm4_9b_layer olmo2_7b_layer gemma2_9b_layer hunyuan_7b_layer command_r_plus_layer}; do
  left=$((580 - SECONDS)); [ $left -lt 60 ] && break
  HOME=/tmp/home_$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$block TRITON_CACHE_DIR=/tmp/tri_$block \
    timeout $((left < 150 ? left : 150)) python blocks.py --blocks $block --modes inference --rounds 2 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases > $OUT/${block}.log 2>&1
  echo "== $block (rc $?, ${SECONDS} s)"
  grep -h "^| [a-z]\|compile s\|of it\|Error" $OUT/${block}.log | cut -c1-250
  grep -o "site [A-Za-z]* [a-z_]* ([0-9, ]*).\{0,250\}" $OUT/${block}.log | cut -c1-250
done
