# Second call: call_a's four failures (NaN: on the op path the consumer was traced without functionalization, so
# the fold's wrap_triton launch went in as a mutation and was dropped; now traced functionally on the GPU), the
# fold timed under CUDA graphs (call_a's eager timings were host time), the LN tower's first compile profiled,
# GPT-2-medium with its sites forced fused (min_speedup 1.0) for the host time per step.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 200 python -m pytest tests/test_regrouped.py -q -p no:cacheprovider \
  -k "weight_fold or folded or dynamic_batch or written_once or trained" > $OUT/regrouped.log 2>&1
echo "== regrouped subset (rc $?, ${SECONDS} s)"; tail -1 $OUT/regrouped.log | cut -c1-200
grep -h "^FAILED\|^ERROR" $OUT/regrouped.log | head -10 | cut -c1-300
timeout 90 python benchmarks/weight_fold.py > $OUT/weight_fold.log 2>&1
echo "== weight_fold (rc $?, ${SECONDS} s)"; grep -v "Warning\|warn(" $OUT/weight_fold.log | tail -16
cd /tmp/site/benchmarks
for spec in recsys_ln_tower:1:--compile-profile gpt2_medium_layer:3:--min-speedup=1.0; do
  IFS=: read block rounds extra <<< "$spec"
  left=$((570 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_b$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_b$block TRITON_CACHE_DIR=/tmp/tri_b$block \
    timeout $((left < 120 ? left : 120)) python blocks.py --blocks $block --modes inference --rounds $rounds \
    --warm-process --host --random-embeds --backends default norm_fusion --gemm-backends triton $extra \
    > $OUT/${block}.log 2>&1
  echo "== $block $extra (rc $?, ${SECONDS} s)"
  grep -h "^| \(gpt2\|recsys\)\|compile s\|of it\|host ms" $OUT/${block}.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}.log | cut -c1-160
done
grep -h -A30 "Ordered by" $OUT/recsys_ln_tower.log | head -45 | cut -c1-200
