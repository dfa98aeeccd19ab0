#!/usr/bin/env bash
# One device call that re-checks everything GPU-side: GPU tests, the quickstart, the full prenorm sweep with the
# current selection (CUDA-graph timings as well), and the plugin profile. Writes logs and JSON under $OUT.
#   (on the GPU machine)  bash benchmarks/validate_gpu.sh      # ~8 min on an H200
set -uo pipefail
source benchmarks/device_setup.sh
cd /tmp/site
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pytest tests/test_gpu.py -q -p no:warnings 2>&1 | tail -3 | tee "$OUT/gpu_tests.log"
python3 examples/quickstart.py 2>&1 | tail -4 | cut -c1-300 | tee "$OUT/quickstart.log"
python3 benchmarks/prenorm.py --max-autotune-shapes 262144x1024x256 16384x4096x4096 --json "$OUT/prenorm.json" \
    2>&1 | grep "^|\|median\|worst" | tee "$OUT/prenorm.log"
python3 benchmarks/prenorm.py --cudagraph --no-max-autotune --quick 2>&1 | grep "^|\|median\|worst" \
    | tee "$OUT/prenorm_cudagraph.log"
python3 benchmarks/prenorm.py --norm ln --no-max-autotune --json "$OUT/prenorm_ln.json" \
    --shapes 65536x1024x1024 65536x2048x256 262144x1024x256 262144x2048x512 16384x4096x4096 \
    2>&1 | grep "^|\|median\|worst" | tee "$OUT/prenorm_ln.log"
