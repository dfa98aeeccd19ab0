# Thirty-fourth session, fifth call: does Inductor's compile of the epilogue GEMM (a user-defined Triton kernel)
# hit the Triton cache entry the pass's measurement compiled? The LN tower's first compile (its consumers are
# measured: compiled in the pass), then every Triton cache entry of epilogue_gemm_kernel, its metadata side by side.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
cd /tmp/site/benchmarks
HOME=/tmp/home_e TORCHINDUCTOR_CACHE_DIR=/tmp/ind_e TRITON_CACHE_DIR=/tmp/tri_e \
  timeout 120 python blocks.py --blocks recsys_ln_tower --modes inference --rounds 1 --warm-process \
  --random-embeds --backends norm_fusion --gemm-backends triton > $OUT/ln_tower.log 2>&1
echo "== ln tower (rc $?)"; grep -h "^| recsys\|compile s\|of it" $OUT/ln_tower.log | cut -c1-250
python - <<'PY' | tee /tmp/out/cache_entries.txt
import json, os, glob
entries = []
for path in glob.glob("/tmp/tri_e/**/*.json", recursive=True):
    try:
        meta = json.load(open(path))
    except Exception:
        continue
    if not isinstance(meta, dict) or "epilogue_gemm" not in str(meta.get("name", "")):
        continue
    entries.append((path, meta))
print(len(entries), "entries")
keys = sorted(set().union(*[m.keys() for _, m in entries])) if entries else []
for p, m in entries:
    print("--", p.split("/")[-2][:16], os.path.getmtime(p))
for k in keys:
    vals = [json.dumps(m.get(k), sort_keys=True)[:300] for _, m in entries]
    mark = "  " if len(set(vals)) == 1 else "!="
    print(mark, k, " | ".join(vals))
PY
ls /tmp/ind_e 2>/dev/null | head; grep -rl "def epilogue_gemm_kernel" /tmp/ind_e 2>/dev/null | head -3
f=$(grep -rl "def epilogue_gemm_kernel" /tmp/ind_e 2>/dev/null | head -1); [ -n "$f" ] && grep -n "user_autotune\|triton_meta\|inductor_meta" "$f" | cut -c1-1500 | head -8
