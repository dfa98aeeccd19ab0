# Forty-first session, first call: NanoChat's weightless QK-norm after rotate_half-swapped RoPE on the GPU (the
# regrouped test and the transformers family, which skips where transformers 5.17 lacks it), then the fresh-process
# first compiles planned as gpu-2026-12-05/call_f.sh (both compilers timed from torch.compile, bytecode cached).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
python -c "import transformers, torch, triton; print(transformers.__version__, torch.__version__, triton.__version__, torch.cuda.get_device_name())"
timeout 150 python -m pytest tests/test_regrouped.py tests/test_hf_models.py -q -p no:cacheprovider -rs \
  -k "weightless_qk_norm or nanochat" > $OUT/nanochat.log 2>&1
echo "== nanochat tests (rc $?, ${SECONDS} s)"; tail -1 $OUT/nanochat.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  \|^SKIPPED" $OUT/nanochat.log | head -12 | cut -c1-300
for spec in recsys_ln_tower:2 llama3_8b_layer:1; do
  IFS=: read block repeats <<< "$spec"
  left=$((570 - SECONDS)); [ $left -lt 60 ] && break
  timeout $left python benchmarks/diagnostics/cold_compile.py --blocks $block --repeats $repeats \
    > $OUT/cold_$block.log 2>&1
  echo "== cold $block (rc $?, ${SECONDS} s)"; tail -2 $OUT/cold_$block.log | cut -c1-400
done
