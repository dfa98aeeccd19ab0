# Thirty-third session, fifth call: which GPU test outlasts the limit (test_regrouped.py verbose, the test names
# as they finish), and where BERT-base's warm second compile goes with two fused sites (2.2 s against default's
# 0.9 in call_e): the first compile, then the second under cProfile (--compile-profile).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 130 python -m pytest tests/test_regrouped.py -v -p no:cacheprovider > $OUT/regrouped_tests.log 2>&1
echo "== test_regrouped (rc $?, ${SECONDS} s)"; grep -c PASSED $OUT/regrouped_tests.log; tail -4 $OUT/regrouped_tests.log | cut -c1-200
cd /tmp/site/benchmarks
for run in first second; do
  prof=$([ $run = second ] && echo --compile-profile || true)
  HOME=/tmp/home_f TORCHINDUCTOR_CACHE_DIR=/tmp/ind_f TRITON_CACHE_DIR=/tmp/tri_f \
    timeout 60 python blocks.py --blocks bert_base_layer --modes inference --rounds 1 --warm-process $prof \
    --random-embeds --backends default norm_fusion --gemm-backends triton --json $OUT/bert_$run.json > $OUT/bert_$run.log 2>&1
  echo "== bert $run (rc $?, ${SECONDS} s)"
  grep -h "compile s\|of it" $OUT/bert_$run.log | cut -c1-250
done
python - <<'PY'
import json; r=json.load(open("/tmp/out/bert_second.json"))
rows=r if isinstance(r,list) else r.get("rows",[r])
for row in rows:
    if isinstance(row,dict) and row.get("compile_profile"): print(row["compile_profile"][:6000])
PY
