# The first call of 2026-12-04: the twenty-eighth session's changes after its last GPU call. 1. the GPU tests of the
# RoPE forms (chunk, an [L, D] table) and of RoPE alone in the q/k epilogue (Llama), and the per-head kernel test
# with RoPE alone at every dtype; 2. the Inductor repro (plain torch, no plugin); 3. the model fuzz.
source benchmarks/device_setup.sh
cd /tmp/site
D=benchmarks/results/gpu-2026-12-03i
F="Warning\|warnings.warn\|Online softmax\|split the reduction\|important use case\|softmax\.$"
(TORCHINDUCTOR_CACHE_DIR=/tmp/ic_repro timeout 400 python $D/inductor_repro.py 2>&1 | grep -v "$F" > $OUT/inductor_repro.log) &
timeout 300 python -m pytest tests/test_regrouped.py -v -p no:warnings --tb=short \
   -k "rope_alone or slices_or_chunk or qk_norm_and_rope_in_the_projection or per_head_norm_and_rope or per_head_norm_with_rope" 2>&1 \
   | grep -v "DEBUG" | tail -40 | cut -c1-300 > $OUT/tests.log
grep "passed\|failed\|FAILED" $OUT/tests.log
timeout 170 python tests/fuzz_models.py --cases 600 --workers 12 --seed 10 --time-limit 110 2>&1 | grep -v "$F" > $OUT/fuzz_models.log
grep -v "cases, 0 wrong$" $OUT/fuzz_models.log | grep -v "^\s*$" | tail -30 | cut -c1-500
wait
cat $OUT/inductor_repro.log | cut -c1-300
