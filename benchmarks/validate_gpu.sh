#!/usr/bin/env bash
# GPU rounds, each fits one device call (10 min). Writes logs and JSON under $OUT.
#   bash benchmarks/validate_gpu.sh checks   # test_gpu.py, quickstart  (~8 min)
#   bash benchmarks/validate_gpu.sh checks2  # the post-norm GPU tests (stress test included)           (~6 min?)
#   bash benchmarks/validate_gpu.sh post ln 1/2  # half of the post-norm sweep of one norm (ln|rms)      (~5 min)
#   bash benchmarks/validate_gpu.sh launch   # FlashNormAttention's cached launches: GPU tests, host time A/B  (~2 min)
#   bash benchmarks/validate_gpu.sh merged   # FlashNormAttention: merged dq̂ + dK/dV backward vs default (~4 min?)
#   bash benchmarks/validate_gpu.sh e2e      # e2e.py without max-autotune: the three cases, both compile times (~9 min; alone: host-sensitive)
#   bash benchmarks/validate_gpu.sh pair "post ln 1/2" "post ln 2/2"  # two rounds at once, one per GPU (nvidia-h200-x2; GPU-bound rounds only)
#   bash benchmarks/validate_gpu.sh nearmiss # compiled_check: its child process for real (~3 min?)
set -uo pipefail
[ -n "${NFI_SITE_READY:-}" ] || source benchmarks/device_setup.sh  # "pair" lays it out once for both rounds
cd /tmp/site
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
case "${1:-checks}" in
checks)
    timeout ${GPU_TESTS_TIMEOUT:-450} python3 -m pytest tests/test_gpu.py -q -p no:warnings --show-capture=no --tb=line \
        > "$OUT/gpu_tests.log" 2>&1; grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -12
    python3 examples/quickstart.py 2>&1 | tail -4 | cut -c1-300 | tee "$OUT/quickstart.log"
    ;;
checks2)  # the post-norm GPU tests (2026-11-30: they no longer fit in one call with test_gpu.py)
    timeout 500 python3 -m pytest tests/test_gpu_post_norm.py -q -p no:warnings --show-capture=no --tb=short \
        > "$OUT/gpu_post_tests.log" 2>&1; grep -E "passed|failed|FAILED|Error|assert" "$OUT/gpu_post_tests.log" | tail -20
    ;;
pair)  # two rounds side by side, one per GPU, each with its own caches (the selection's, Inductor's, Triton's)
    for gpu in 0 1; do
        round=$([ $gpu = 0 ] && echo "$2" || echo "$3")
        NFI_SITE_READY=1 CUDA_VISIBLE_DEVICES=$gpu HOME=/tmp/home$gpu TORCHINDUCTOR_CACHE_DIR=/tmp/inductor$gpu \
            TRITON_CACHE_DIR=/tmp/triton$gpu OUT="$OUT/gpu$gpu" bash benchmarks/validate_gpu.sh $round \
            > "$OUT/gpu$gpu.log" 2>&1 &
    done
    wait
    tail -n 40 "$OUT"/gpu0.log "$OUT"/gpu1.log
    ;;
e2e)  # issue 7: Llama, BERT and the recommendation block, inference and training step; cold and warm compile times
    timeout ${E2E_TIMEOUT:-560} python3 benchmarks/e2e.py --no-max-autotune --json "$OUT/e2e.json" 2>&1 \
        | grep -v Warning | tail -30 | tee "$OUT/e2e.log"
    ;;
launch)  # FlashNormAttention through the cached launcher (CACHED_LAUNCH_BY_DEFAULT): right? less host time? (~2 min)
    timeout 200 python3 -m pytest tests/test_gpu_norm_attention.py tests/test_gpu.py \
        -k "cached_launches or repeated_launches" -q -p no:warnings --show-capture=no --tb=short 2>&1 \
        | grep -E "passed|failed|Error|assert" | tail -8 | tee "$OUT/launch_tests.log"
    for flag in "" "--cached-launch" "" "--cached-launch"; do
        (cd benchmarks && timeout 60 python3 diagnostics/attention_host.py --heads 2 --max-len 512 $flag 2>&1) \
            | grep -E "cached|host|Error" | tee -a "$OUT/attention_host.log"
    done
    ;;
merged)  # the merged backward's and the selection's GPU tests, then per-kernel times with and without it
    timeout 200 python3 -m pytest tests/test_gpu_norm_attention.py -k "policy or merged" -q -p no:warnings \
        --show-capture=no --tb=short > "$OUT/merged_tests.log" 2>&1
    grep -E "passed|failed|Error|assert" "$OUT/merged_tests.log" | tail -12
    for shape in "--max-lens 1024" "--max-lens 512 --dense"; do
        for m in "" "--merged"; do
            timeout 90 python3 benchmarks/attention.py --breakdown --heads 4 $shape $m 2>&1 \
                | grep -E "breakdown|merged|Error" | tee -a "$OUT/merged_breakdown.log"
        done
    done
    ;;
nearmiss)  # NormFusionConfig.compiled_check: its child process for real
    timeout 200 python3 -m pytest tests/test_gpu.py -k compiled_check -q -p no:warnings --show-capture=no --tb=short \
        2>&1 | tail -8 | tee "$OUT/compiled_check_tests.log"
    ;;
post)
    python3 benchmarks/postnorm.py --norm "${2:-ln}" --part "${3:-1/1}" --no-max-autotune \
        --json "$OUT/postnorm_${2:-ln}.json" 2>&1 | grep "^|\|median\|worst" | tee "$OUT/postnorm_${2:-ln}.log"
    ;;
esac
