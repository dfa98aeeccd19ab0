# Thirty-sixth session, first call: the weight fold as one Triton kernel (kernels/weight_fold.py, a direct launch:
# no op per step; selection._host_bound removed). GPU tests (the kernel, the folds, the selection paths, the
# test_regrouped subset of direct launches and trained models), the fold against Inductor's and a copy, then
# GPT-2-medium (5 rounds) and the LN tower (3 rounds) with --host, cold caches, first compile.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 100 python -m pytest tests/test_direct_launch.py tests/test_selection.py tests/test_quack_backend.py -q \
  -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
echo "== selection tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/gpu_tests.log | cut -c1-200
grep -h "^FAILED\|^ERROR" $OUT/gpu_tests.log | head -10 | cut -c1-300
timeout 200 python -m pytest tests/test_regrouped.py -q -p no:cacheprovider \
  -k "weight_fold or folded or launched_from_inductor or dynamic_batch or written_once or price_the or trained" \
  > $OUT/regrouped.log 2>&1
echo "== regrouped subset (rc $?, ${SECONDS} s)"; tail -1 $OUT/regrouped.log | cut -c1-200
grep -h "^FAILED\|^ERROR" $OUT/regrouped.log | head -10 | cut -c1-300
timeout 90 python benchmarks/weight_fold.py > $OUT/weight_fold.log 2>&1
echo "== weight_fold (rc $?, ${SECONDS} s)"; grep -v "Warning\|warn(" $OUT/weight_fold.log | tail -16
cd /tmp/site/benchmarks
for spec in gpt2_medium_layer:5 recsys_ln_tower:3; do
  IFS=: read block rounds <<< "$spec"
  left=$((570 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_a$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_a$block TRITON_CACHE_DIR=/tmp/tri_a$block \
    timeout $((left < 120 ? left : 120)) python blocks.py --blocks $block --modes inference --rounds $rounds \
    --warm-process --host --random-embeds --backends default norm_fusion --gemm-backends triton > $OUT/${block}.log 2>&1
  echo "== $block (rc $?, ${SECONDS} s)"
  grep -h "^| \(gpt2\|recsys\)\|compile s\|of it\|host ms" $OUT/${block}.log | cut -c1-250
  grep -h "site [A-Za-z]* [a-z_]* ([0-9, ]*)" $OUT/${block}.log | cut -c1-160
done
