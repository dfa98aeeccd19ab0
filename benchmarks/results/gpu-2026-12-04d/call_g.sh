# Issue 27: what measure_budget_s leaves pending is timed by the next compile. Per block: the first compile (cold
# caches, warm process, 1 round), then a new process on the same caches (Inductor's FX graph cache misses while a
# measurement is pending), 3 rounds: its compile time, sites and speed.
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
OUT=${OUT:-/tmp/out}
for block in bert_base_layer qwen3_1p7b_layer; do
  for run in first second; do
    rounds=$([ $run = first ] && echo 1 || echo 3)
    left=$((570 - SECONDS)); [ $left -lt 40 ] && break
    HOME=/tmp/home_g_$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_g_$block TRITON_CACHE_DIR=/tmp/tri_g_$block \
      timeout $((left < 150 ? left : 150)) python blocks.py --blocks $block --modes inference --rounds $rounds --warm-process \
      --random-embeds --backends default norm_fusion --gemm-backends triton --json $OUT/${block}_$run.json > $OUT/${block}_$run.log 2>&1
    echo "== $block $run (rc $?)"
    grep -h "^| \(qwen\|bert\)\|compile s\|of it" $OUT/${block}_$run.log | cut -c1-250
    grep -ho "site [A-Za-z]* [a-z_]* ([0-9, ]*)\|clear win\|measure_budget_s=[0-9.]*" $OUT/${block}_$run.log | sort | uniq -c | cut -c1-200
  done
done
