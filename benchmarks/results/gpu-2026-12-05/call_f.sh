# Fortieth session: the LN tower's first compile in fresh processes again, measured alike for both compilers
# (call_c timed the plugin's import, which imports Dynamo and Inductor, but not default's torch.compile call,
# which imports them; and the GPU machine's venv keeps no bytecode: call_e, 2357 modules compiled from source).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 150 python benchmarks/diagnostics/cold_compile.py --blocks recsys_ln_tower --repeats 2 > $OUT/cold_ln.log 2>&1
echo "== cold recsys_ln_tower (rc $?, ${SECONDS} s)"; tail -3 $OUT/cold_ln.log | cut -c1-300
