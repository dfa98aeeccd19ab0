# Forty-second session, third call (H100): candidate block configs for the head_dim-256 per-head epilogue
# (head256_configs.py: Qwen3-Next's gated q, Gemma 3's q; Llama-3-8B's head_dim-128 q as the control).
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
timeout 400 python benchmarks/results/gpu-2026-12-05c/head256_configs.py $OUT/head256.json > $OUT/head256.log 2>&1
echo "== rc $?"; grep -v "Warning\|warn(" $OUT/head256.log | cut -c1-200 | tail -45
