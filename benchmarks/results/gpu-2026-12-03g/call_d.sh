# The consumer's output alone (diag_y.py): is y wrong at |μ| = 1000σ (call_c: only down.weight's gradient, which reads y, was off)?
source benchmarks/device_setup.sh
cd /tmp/site
timeout 140 python benchmarks/results/gpu-2026-12-03g/diag_y.py 2>&1 | grep -v "Warning\|warnings.warn" | tail -34
