# Thirty-fourth session, sixth call: the GPU tests of the selection paths after the survey (it runs in every GPU
# compile at policy auto now) and the pricing change.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
timeout 240 python -m pytest tests/test_direct_launch.py tests/test_selection.py tests/test_quack_backend.py -q \
  -p no:cacheprovider --durations=5 > $OUT/gpu_tests.log 2>&1
echo "== GPU tests (rc $?, ${SECONDS} s)"; tail -12 $OUT/gpu_tests.log | cut -c1-200
grep -h "^FAILED\|^ERROR\|^E " $OUT/gpu_tests.log | head -10 | cut -c1-300
