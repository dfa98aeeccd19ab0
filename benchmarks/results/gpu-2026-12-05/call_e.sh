# Fortieth session: where the LN tower's first compile in a fresh process goes (call_c: 19.7 s vs default's
# 4.35 s; in blocks.py's one process, default first, 3.17 vs 1.14 s). The plugin's child under cProfile, empty
# caches; then the import alone.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
HOME=/tmp/h_e TORCHINDUCTOR_CACHE_DIR=/tmp/i_e TRITON_CACHE_DIR=/tmp/t_e timeout 150 python -m cProfile \
  -o $OUT/cold_child.prof benchmarks/diagnostics/cold_compile.py --child recsys_ln_tower norm_fusion > $OUT/cold_child.log 2>&1
echo "== profiled child (rc $?, ${SECONDS} s)"; tail -2 $OUT/cold_child.log | cut -c1-300
python - <<'PY' > $OUT/cold_child_stats.txt 2>&1
import pstats, os
p = pstats.Stats(os.environ.get("OUT", "/tmp/out") + "/cold_child.prof"); p.sort_stats("cumulative"); p.print_stats(70)
PY
grep -E "^ +[0-9/]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ " $OUT/cold_child_stats.txt | awk '$4 > 0.4' | head -45 | cut -c1-200
HOME=/tmp/h_f timeout 60 python -X importtime -c "import norm_fusion_inductor" 2> $OUT/importtime.txt
echo "== import (rc $?, ${SECONDS} s)"; sort -t'|' -k2 -n $OUT/importtime.txt | tail -12 | cut -c1-160
# the one test call_c's 330 s did not reach (every offered config compiled, RoPE + aux)
left=$((560 - SECONDS))
timeout $((left < 240 ? left : 240)) python -m pytest tests/test_regrouped.py -q -p no:cacheprovider \
  -k "test_per_head_norm_with_rope_and_aux_at_every_offered_config" > $OUT/rope_aux_configs.log 2>&1
echo "== rope+aux every config (rc $?, ${SECONDS} s)"; tail -1 $OUT/rope_aux_configs.log | cut -c1-200
grep -h "^FAILED\|^E  " $OUT/rope_aux_configs.log | head -6 | cut -c1-300
