# Issue 27: first compile of the transformers blocks with the current defaults (the prologues gone), each block in a
# fresh process with cold caches (the plugin's choices, Inductor's, Triton's), default and the plugin side by side;
# then the Qwen3 block again in a new process on the same caches (the warm second compile). Triton GEMMs alone (no
# Quack kit on this machine unless call_f ran: then both).
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
OUT=${OUT:-/tmp/out}
run() {  # name, cache tag, limit, label
  HOME=/tmp/home_$2 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor_$2 TRITON_CACHE_DIR=/tmp/triton_$2 timeout $3 \
    python blocks.py --blocks $1 --modes inference --rounds 1 --random-embeds --backends default norm_fusion \
    --json $OUT/compile_$1_$4.json 2>&1 | grep -v "Warning\|warn" | grep "^|\|compile s\|site\|Error" | cut -c1-400 | sed "s/^/[$4] /" | tee -a $OUT/compile.log
}
run qwen3_1p7b_layer q17 140 cold
run qwen3_1p7b_layer q17 100 warm   # the same caches: the warm second compile
run bert_base_layer bert 100 cold
