# Fortieth session (planned, not run: the session's device time ran out): the first compile in fresh processes,
# measured alike for both compilers (call_c timed the plugin's import, which imports Dynamo and Inductor, but not
# default's torch.compile call, which imports them; and the GPU machine's venv keeps no bytecode: call_e, 2357
# modules compiled from source). cold_compile.py now times both from torch.compile, bytecode cached first, and
# prints the import + torch.compile call's share in brackets.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
for spec in recsys_ln_tower:2 llama3_8b_layer:1; do
  IFS=: read block repeats <<< "$spec"
  left=$((570 - SECONDS)); [ $left -lt 60 ] && break
  timeout $left python benchmarks/diagnostics/cold_compile.py --blocks $block --repeats $repeats \
    > $OUT/cold_$block.log 2>&1
  echo "== cold $block (rc $?, ${SECONDS} s)"; tail -2 $OUT/cold_$block.log | cut -c1-400
done
