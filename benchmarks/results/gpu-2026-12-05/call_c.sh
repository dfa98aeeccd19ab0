# Fortieth session, third call of the round: the GPU tests call_a's 150 s cut short (18 of 28 passed), Gemma 4's
# family tests, and the LN tower's first compile in fresh processes (cold_compile.py now imports the package,
# timed, where no entry point registers the backend).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 330 python -m pytest tests/test_regrouped.py -q -p no:cacheprovider \
  -k "launched_from_inductor or rope_written or qk_norm_and_rope or per_head_norm" > $OUT/regrouped.log 2>&1
echo "== regrouped subset (rc $?, ${SECONDS} s)"; tail -1 $OUT/regrouped.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  " $OUT/regrouped.log | head -12 | cut -c1-300
timeout 120 python -m pytest tests/test_hf_models.py -q -p no:cacheprovider -k gemma4 > $OUT/hf_gemma4.log 2>&1
echo "== hf gemma4 (rc $?, ${SECONDS} s)"; tail -1 $OUT/hf_gemma4.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E  " $OUT/hf_gemma4.log | head -8 | cut -c1-300
left=$((570 - SECONDS))
[ $left -gt 60 ] && timeout $left python benchmarks/diagnostics/cold_compile.py --blocks recsys_ln_tower --repeats 2 \
  > $OUT/cold_recsys_ln_tower_1.log 2>&1
echo "== cold recsys_ln_tower (rc $?, ${SECONDS} s)"; tail -3 $OUT/cold_recsys_ln_tower_1.log | cut -c1-300
