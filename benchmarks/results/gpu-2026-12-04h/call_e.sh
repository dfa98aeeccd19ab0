# Fifth call (the device time left): the warm second compile with this session's code — the LN tower, then BERT-base,
# each first on empty caches, then a new process on the same caches.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
cd /tmp/site/benchmarks
for spec in recsys_ln_tower:first recsys_ln_tower:second bert_base_layer:first bert_base_layer:second; do
  IFS=: read block run <<< "$spec"
  left=$((170 - SECONDS)); [ $left -lt 30 ] && break
  HOME=/tmp/home_e$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_e$block TRITON_CACHE_DIR=/tmp/tri_e$block \
    timeout $left python blocks.py --blocks $block --modes inference --rounds 1 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton > $OUT/${block}_$run.log 2>&1
  echo "== $block $run (rc $?, ${SECONDS} s)"
  grep -h "^| \(recsys\|bert\)\|compile s\|of it" $OUT/${block}_$run.log | cut -c1-200
done
