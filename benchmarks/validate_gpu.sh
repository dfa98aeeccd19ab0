#!/usr/bin/env bash
# GPU rounds, each fits one device call (10 min). Writes logs and JSON under $OUT.
#   bash benchmarks/validate_gpu.sh checks   # every kernel config vs float64, test_gpu.py, quickstart  (~9 min)
#   bash benchmarks/validate_gpu.sh checks2  # the post-norm GPU tests (stress test included)           (~6 min?)
#   bash benchmarks/validate_gpu.sh sweep [i/n]  # the RMS sweep (or its i-th of n slices), with the control (~9 min)
#   bash benchmarks/validate_gpu.sh ln [i/n]     # the LayerNorm sweep (K, N <= 2048): ~8 min a half (child compiles)
#   bash benchmarks/validate_gpu.sh post ln 1/2  # half of the post-norm sweep of one norm (ln|rms)      (~5 min)
#   bash benchmarks/validate_gpu.sh attention [bench args]  # FlashNormAttention: GPU tests, kernel configs, bench
#   bash benchmarks/validate_gpu.sh acc_ab   # FlashNormAttention: the residual in the forward's accumulator, tests + A/B (~5 min?)
#   bash benchmarks/validate_gpu.sh recsys   # the recommendation block: attention GPU tests, breakdowns, e2e, dq̂ configs (~8 min?)
#   bash benchmarks/validate_gpu.sh launch   # FlashNormAttention's cached launches: GPU tests, host time A/B  (~2 min)
#   bash benchmarks/validate_gpu.sh statsblock # the in-loop row sums in their own block: float64 checks on, then A/B (~6 min?)
#   bash benchmarks/validate_gpu.sh merged   # FlashNormAttention: merged dq̂ + dK/dV backward vs default (~4 min?)
#   bash benchmarks/validate_gpu.sh gluon [-k] ["--ws --w-kn"]  # Gluon GPU tests, float64 check (+ WS / W [K,N]), host cost (~4-8 min?)
#   bash benchmarks/validate_gpu.sh host     # host time per call of a fused site (Gluon vs Triton)  (~2 min)
#   bash benchmarks/validate_gpu.sh lnprobe  # which piece of the in-loop LayerNorm kernel the miscompile needs (~2 min?)
#   bash benchmarks/validate_gpu.sh e2e      # e2e.py without max-autotune: the three cases, both compile times (~9 min; alone: host-sensitive)
#   bash benchmarks/validate_gpu.sh pair "ln 1/2" "ln 2/2"  # two rounds at once, one per GPU (nvidia-h200-x2; GPU-bound rounds only)
#   bash benchmarks/validate_gpu.sh nearmiss # compiled_check: its child process for real, then the LayerNorm near misses (~6 min?)
set -uo pipefail
[ -n "${NFI_SITE_READY:-}" ] || source benchmarks/device_setup.sh  # "pair" lays it out once for both rounds
cd /tmp/site
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
case "${1:-checks}" in
checks)
    for a in "--norm rms --shape 4096x1024x768" "--norm rms --shape 8192x4096x1024" "--norm ln --shift 1000"; do
        python3 benchmarks/diagnostics/kernel_check.py $a >> "$OUT/kernel_check.log" 2>&1
    done
    # a line per (variant, config); flag errors above bf16 rounding
    awk '{split($0,a,"out "); split(a[2],b," "); if (b[1]+0 > 0.01 || $0 ~ /Error/) print "BAD", $0}' \
        "$OUT/kernel_check.log" | cut -c1-200
    timeout ${GPU_TESTS_TIMEOUT:-450} python3 -m pytest tests/test_gpu.py -q -p no:warnings --show-capture=no --tb=line \
        > "$OUT/gpu_tests.log" 2>&1; grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -12
    python3 examples/quickstart.py 2>&1 | tail -4 | cut -c1-300 | tee "$OUT/quickstart.log"
    ;;
checks2)  # the post-norm GPU tests (2026-11-30: they no longer fit in one call with test_gpu.py)
    timeout 500 python3 -m pytest tests/test_gpu_post_norm.py -q -p no:warnings --show-capture=no --tb=short \
        > "$OUT/gpu_post_tests.log" 2>&1; grep -E "passed|failed|FAILED|Error|assert" "$OUT/gpu_post_tests.log" | tail -20
    ;;
sweep)  # [i/n]: a slice of the shapes
    part=${2:-1/1}
    timeout ${SWEEP_TIMEOUT:-590} python3 benchmarks/prenorm.py --lean --no-max-autotune --part "$part" \
        --json "$OUT/prenorm_${part/\//of}.json" 2>&1 | grep --line-buffered "^|\|median\|worst" \
        | tee "$OUT/prenorm_${part/\//of}.log"
    ;;
ln)  # [i/n]: a slice of the shapes
    part=${2:-1/1}
    timeout ${SWEEP_TIMEOUT:-590} python3 benchmarks/prenorm.py --norm ln --lean --no-max-autotune --part "$part" \
        --json "$OUT/prenorm_ln_${part/\//of}.json" \
        --shapes $(python3 -c "from benchmarks.prenorm import SWEEP; print(' '.join('%dx%dx%d' % s for s in SWEEP))") \
        2>&1 | grep --line-buffered "^|\|median\|worst" | tee "$OUT/prenorm_ln_${part/\//of}.log"
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
statsblock)  # the in-loop row sums in their own basic block (STATS_OWN_BLOCK): float64 checks with it on, then A/B (~6 min?)
    timeout 150 python3 benchmarks/diagnostics/gluon_probe.py --ws --w-kn --stats-own-block --no-timing 2>&1 \
        | grep -E "worst|Error|assert" | tee "$OUT/statsblock_check.log"
    timeout 240 python3 -c "import sys, pytest; from norm_fusion_inductor.kernels import norm_gemm_gluon as g; \
g.STATS_OWN_BLOCK_BY_DEFAULT = True; sys.exit(pytest.main(['tests/test_gpu.py', '-q', '-p', 'no:warnings', '--tb=short', \
'-k', 'gluon or layer_norm_kernel_within or kernel_matches_float64']))" > "$OUT/statsblock_tests.log" 2>&1
    grep -E "passed|failed|Error|assert" "$OUT/statsblock_tests.log" | tail -8
    timeout 200 python3 benchmarks/diagnostics/gluon_probe.py --ws --stats-own-block --json "$OUT/statsblock.json" \
        --ln 65536x1024x1024 262144x1024x1024 65536x2048x2048 262144x512x1024 65536x512x2048 262144x256x2048 \
        2>&1 | tee "$OUT/statsblock.log" | grep -E "^ln|kernel|Error"
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
lnprobe)
    timeout 300 python3 benchmarks/diagnostics/ln_inloop_probe.py 2>&1 | tee "$OUT/ln_inloop_probe.log"
    timeout 120 python3 benchmarks/diagnostics/repro_where_wgmma.py 2>&1 | tee "$OUT/repro_where_wgmma.log"  # standalone
    ;;
gluon)  # the Gluon mainloop: its GPU tests (every plan vs float64), the probe's check and host cost (~4 min?)
    timeout 170 python3 -m pytest tests/test_gpu.py -k "${2:-kernel_matches_float64 or layer_norm_kernel}" -q -p no:warnings \
        --show-capture=no --tb=short > "$OUT/gluon_tests.log" 2>&1; grep -E "passed|failed|Error|assert" "$OUT/gluon_tests.log" | tail -12
    timeout 420 python3 benchmarks/diagnostics/gluon_probe.py ${3:---no-timing} > "$OUT/gluon_check.log" 2>&1
    grep -E "worst|host|Error|x cuBLAS|hidden" "$OUT/gluon_check.log"
    ;;
host)  # where a fused site's host time goes (the Gluon thin op vs Inductor's launch)
    timeout 150 python3 benchmarks/diagnostics/host_profile.py 65536x512x256 --norm ln 2>&1 | tee "$OUT/host_profile.log" \
        | grep -E "us/call|site:|Error"
    ;;
nearmiss)  # NormFusionConfig.compiled_check: its child process for real, then the sites it is for
    timeout 200 python3 -m pytest tests/test_gpu.py -k compiled_check -q -p no:warnings --show-capture=no --tb=short \
        2>&1 | tail -8 | tee "$OUT/compiled_check_tests.log"
    timeout 330 python3 benchmarks/prenorm.py --norm ln --lean --no-max-autotune \
        --json "$OUT/prenorm_ln_nearmiss.json" --shapes 65536x2048x1024 262144x2048x1024 65536x512x512 \
        262144x256x256 262144x512x256 65536x2048x2048 2>&1 | grep --line-buffered "^|\|median\|worst" \
        | tee "$OUT/prenorm_ln_nearmiss.log"
    ;;
post)
    python3 benchmarks/postnorm.py --norm "${2:-ln}" --part "${3:-1/1}" --no-max-autotune \
        --json "$OUT/postnorm_${2:-ln}.json" 2>&1 | grep "^|\|median\|worst" | tee "$OUT/postnorm_${2:-ln}.log"
    ;;
esac
