# Thirty-fourth session, fourth call: where the LN tower's first compile goes (7.6 s against default's 1.5 in
# call_c, pass 3.1 s): the first compile under cProfile (--compile-profile), cold caches, warm process.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
cd /tmp/site/benchmarks
for block in recsys_ln_tower; do
  HOME=/tmp/home_p$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_p$block TRITON_CACHE_DIR=/tmp/tri_p$block \
    timeout 150 python blocks.py --blocks $block --modes inference --rounds 1 --warm-process --compile-profile \
    --random-embeds --backends default norm_fusion --gemm-backends triton > $OUT/${block}_profile.log 2>&1
  echo "== $block (rc $?, ${SECONDS} s)"
  grep -h "^| recsys\|compile s\|of it" $OUT/${block}_profile.log | cut -c1-250
  grep -A60 "ncalls" $OUT/${block}_profile.log | cut -c1-200 | head -70
done
