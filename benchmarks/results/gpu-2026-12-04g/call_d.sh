# Thirty-fifth session, fourth call: GPT-2-medium ran 0.72x / 0.82x default in call_c with its fc GEMM
# (8192x1024x4096 + GELU-tanh, 1.07x its bound) launched directly: host time per step of default and the plugin
# (--host), five rounds, cold caches; then the same with min_speedup 1.1 (the site declined) as the control.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
cd /tmp/site/benchmarks
for spec in fused:1.05 declined:1.1; do
  IFS=: read tag ms <<< "$spec"
  HOME=/tmp/home_h$tag TORCHINDUCTOR_CACHE_DIR=/tmp/ind_h$tag TRITON_CACHE_DIR=/tmp/tri_h$tag \
    timeout 200 python blocks.py --blocks gpt2_medium_layer --modes inference --rounds 5 --host \
    --random-embeds --backends default norm_fusion --gemm-backends triton --min-speedup $ms \
    > $OUT/gpt2_$tag.log 2>&1
  echo "== gpt2 $tag (rc $?, ${SECONDS} s)"
  grep -v "^ *site\|Warning\|warnings.warn" $OUT/gpt2_$tag.log | head -60 | cut -c1-220
done
