# Issue 27's next step: where the RMS tower's first compile goes with Triton alone (cold caches; cProfile of the
# plugin's first call, top entries by cumulative time).
source benchmarks/device_setup.sh
cd /tmp/site/benchmarks
OUT=${OUT:-/tmp/out}
timeout 200 python blocks.py --blocks recsys_rms_tower --modes inference --rounds 1 --backends default norm_fusion \
  --gemm-backends triton --compile-profile --json $OUT/compile_profile_rms.json > $OUT/compile_profile_rms.log 2>&1
grep -h "^| recsys\|compile s" $OUT/compile_profile_rms.log | cut -c1-200
python - <<'PY'
import json, os
rows = json.load(open(os.environ.get("OUT", "/tmp/out") + "/compile_profile_rms.json"))
row = rows[0] if isinstance(rows, list) else rows.get("rows", [rows])[0]
print(row.get("compile_profile", "")[:6000])
PY
