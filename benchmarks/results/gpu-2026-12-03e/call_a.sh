# Triton alone (the session's device time nearly spent: ~8 min). 1. The GPU tests touched this session (GELU over
# a wide range now on the GPU, the one-MUFU activations and the residual read after the k-loop now the defaults,
# statistics on two-segment tiles, the timings leave no cuBLAS workspace allocated). 2. Convergence again, now that
# the timings free the cuBLAS workspaces of their side stream (the plugin's peak read 1.23x / 1.68x default's with
# policy auto rewriting nothing) and BERT learns masked positions. 3. The epilogue pieces at the RMS tower's
# producer shape (statistics may now take 256-wide tiles), with what time is left.
source benchmarks/device_setup.sh
cd /tmp/site
timeout 110 python -m pytest tests/test_regrouped.py tests/test_selection.py -q -p no:warnings -k "timing_leaves or fast_sigmoid or gelu or load_after_mainloop or two_segments or layer_norm_statistics or (epilogue_gemm_matches and ln)" -rf --tb=line 2>&1 | grep -v "^\.\|^s" | tail -6 | tee $OUT/tests.log
for model in llama bert; do
  timeout 130 python benchmarks/convergence.py --models $model --json $OUT/convergence_$model.json > $OUT/convergence_$model.log 2>&1
  grep "^|\|PASS\|FAIL" $OUT/convergence_$model.log | tail -4
done
timeout $((400 - SECONDS)) python benchmarks/diagnostics/epilogue_configs.py --pieces 262144x1024x256 > $OUT/pieces.log 2>&1
grep -v "^  (" $OUT/pieces.log | grep -v "^configs" | cut -c1-120
grep "^  (" $OUT/pieces.log | grep "stats='" | sed "s/residual_norm.*stats=/ stats=/; s/, norm_backward.*->/ ->/" | cut -c1-220
