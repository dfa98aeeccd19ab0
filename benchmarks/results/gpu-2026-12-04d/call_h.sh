# After the selection's changes (model-decided clear wins, the untuned default config, measure_budget_s): the GPU
# tests of the selection, the direct launch and the epilogue GEMM's backends (Quack absent: its tests skip).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
timeout 200 python -m pytest tests/test_direct_launch.py tests/test_selection.py tests/test_quack_backend.py -q -p no:warnings -x > $OUT/gpu_tests.log 2>&1
echo "rc $?"; tail -5 $OUT/gpu_tests.log
