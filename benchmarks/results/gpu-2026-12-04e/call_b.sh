# Thirty-third session, second call: the transformers blocks' first compile (cold caches, warm process, 1 round:
# compile times and sites, not a timing) with model_margin 1.15 and the shipped pattern traces; then BERT-base and
# Qwen3-1.7B-like again in a new process on the same caches (the warm second compile: revisit_pending off).
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
OUT=${OUT:-/tmp/out}
SECONDS=0
for spec in qwen3_1p7b_layer:first llama3_8b_layer:first bert_base_layer:first gpt2_medium_layer:first \
            gemma3_4b_layer:first bert_base_layer:second qwen3_1p7b_layer:second; do
  block=${spec%:*}; run=${spec#*:}
  left=$((575 - SECONDS)); [ $left -lt 40 ] && break
  HOME=/tmp/home_b_$block TORCHINDUCTOR_CACHE_DIR=/tmp/ind_b_$block TRITON_CACHE_DIR=/tmp/tri_b_$block \
    timeout $((left < 120 ? left : 120)) python blocks.py --blocks $block --modes inference --rounds 1 --warm-process \
    --random-embeds --backends default norm_fusion --gemm-backends triton --json $OUT/${block}_$run.json > $OUT/${block}_$run.log 2>&1
  echo "== $block $run (rc $?, ${SECONDS} s)"
  grep -h "^| \(qwen\|llama\|bert\|gpt2\|gemma\)\|compile s\|of it" $OUT/${block}_$run.log | cut -c1-250
  grep -ho "site [A-Za-z]* [a-z_]* ([0-9, ]*)\|clear win\|measure_budget_s=[0-9.]*\|measurement failed[^)]*)" $OUT/${block}_$run.log | sort | uniq -c | cut -c1-200
done
