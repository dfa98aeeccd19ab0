# Thirty-seventh session, third call (planned, not run): the decoder blocks' q/k projections with RoPE (no
# default tile: tuned over every config in the first compile) — which config wins and by how much, for a default
# tile of their own; then Qwen3 and Gemma3 on empty caches with the measure_budget_s rule.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 300 python /tmp/site/benchmarks/diagnostics/epilogue_configs.py --grid --rounds 3 --sites \
  per_head:16384x4096x4096:rope=1:head_norm=0 per_head:16384x4096x1024:rope=1:head_norm=0 \
  per_head:8192x2048x2048:rope=1 per_head:8192x2560x2048:rope=1:head_dim=256 > $OUT/rope_configs.log 2>&1
echo "== rope configs (rc $?, ${SECONDS} s)"; grep -v "Warning\|warn(" $OUT/rope_configs.log | tail -40
cd /tmp/site/benchmarks
for block in qwen3_1p7b_layer gemma3_4b_layer; do
  left=$((570 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_c$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_c$block TRITON_CACHE_DIR=/tmp/tri_c$block \
    timeout $((left < 120 ? left : 120)) python blocks.py --blocks $block --modes inference --rounds 2 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --compile-phases > $OUT/${block}.log 2>&1
  echo "== $block (rc $?, ${SECONDS} s)"
  grep -h "^| \(qwen\|gemma\)\|compile s\|of it" $OUT/${block}.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}.log | grep -v qk_norm | cut -c1-220
done
