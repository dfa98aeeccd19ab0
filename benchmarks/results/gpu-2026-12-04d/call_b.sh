# Issue 27: every Triton config the tuner offers at the calibration grid's sites and the towers' GEMMs (graph_ms,
# 3 interleaved rounds): how much an untuned default config loses against the tuned one, per epilogue kind.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
timeout 560 python benchmarks/diagnostics/epilogue_configs.py --grid --json $OUT/config_grid.json > $OUT/config_grid.log 2>&1
echo "rc $?"; grep -h "configs compiled" $OUT/config_grid.log | cut -c1-160; tail -3 $OUT/config_grid.log
