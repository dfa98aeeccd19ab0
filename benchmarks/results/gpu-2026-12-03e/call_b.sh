# Triton alone. 1. The GPU tests call_a's 110 s cut off (two-segment statistics, the timings' cuBLAS workspaces,
# the one-MUFU activations, the residual read after the k-loop). 2. The statistics pieces with and without the
# 128x256 two-segment tiles at the towers' producer shapes (the tuner now keys its configs by the tuning record).
source benchmarks/device_setup.sh
cd /tmp/site
timeout 230 python -m pytest tests/test_regrouped.py tests/test_selection.py -q -p no:warnings -k "timing_leaves or fast_sigmoid or gelu or load_after_mainloop or two_segments or layer_norm_statistics or (epilogue_gemm_matches and ln)" -rf --tb=short > $OUT/tests.log 2>&1
grep -v "^[.sF]*\( *\[.*\]\)\?$" $OUT/tests.log | tail -25
timeout $((420 - SECONDS)) python benchmarks/diagnostics/epilogue_configs.py --pieces 262144x1024x256 131072x1024x512 --only residual "rms stats" "ln stats" "residual+rms stats" "bias+residual+ln stats" --variant epilogue_stats_two_segments > $OUT/pieces.log 2>&1
grep -v "^  (" $OUT/pieces.log | grep -v "^configs" | cut -c1-140
grep "^  (" $OUT/pieces.log | grep "stats='" | sed "s/residual_norm.*stats=/ stats=/; s/, norm_backward[^)]*)/)/" | cut -c1-260
