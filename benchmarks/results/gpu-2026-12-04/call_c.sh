# 1. The Inductor bug reduced to tensors (plain torch, no plugin). 2. Issue 24 item 5: norm → linear pairs with
# and without the older in-loop prologue families (prologue_off.py), RMSNorm then LayerNorm.
source benchmarks/device_setup.sh
cd /tmp/site
D=benchmarks/results/gpu-2026-12-04
F="Warning\|warnings.warn\|Online softmax\|split the reduction\|important use case\|softmax\.$"
TORCHINDUCTOR_CACHE_DIR=/tmp/ic_min timeout 150 python $D/inductor_repro_min.py 2>&1 | grep -v "$F" | tee $OUT/inductor_repro_min.log | cut -c1-200
timeout $(( (590 - SECONDS) * 6 / 10 )) python $D/prologue_off.py --norm rms 2>&1 | grep -v "$F" > $OUT/prologue_off_rms.log
cut -c1-300 $OUT/prologue_off_rms.log | tail -14
timeout $((590 - SECONDS)) python $D/prologue_off.py --norm ln --shapes 65536x512x1024 65536x1024x1024 262144x256x1024 262144x1024x512 16384x4096x4096 2>&1 | grep -v "$F" > $OUT/prologue_off_ln.log
cut -c1-300 $OUT/prologue_off_ln.log | tail -8
