# One GPU round of the Quack backend (issue 25). The kit (../shared/cute, copied to .cute/ as its README says)
# travels in two calls made back to back on one warm machine:
#   bash benchmarks/quack_round.sh unpack            (carry .cute/a)
#   bash benchmarks/quack_round.sh PART              (carry .cute/b; later calls on the same machine too)
# PART: kernels = the Quack tests and the epilogue GEMMs of both backends at the recsys shapes;
#       llama_kernels = the same at the Llama-3-8B shapes (and the recsys shape the first run's limit cut);
#       towers = the recsys towers (default, the plugin with both backends, the plugin with Triton alone);
#       llama = the Llama-3-8B and Qwen3 layers the same way (BLOCKS=... picks some; BLOCK_ARGS="--profile
#               --min-speedup 1.02" adds options; BLOCK_ARGS="--mode reduce-overhead": every compiler with CUDA
#               graphs, where Quack's op calls cost no host time); bert = BERT-base and GPT-2-medium;
#       backward = the RMSNorm backward on the dgrad (tests, benchmark; both variants), the model trained
#       through Quack, the fuzz;
#       checks = the fp16 Quack tests, the model trained through Quack and both fuzz runs in one call;
#       qk = the per-head norm + RoPE epilogue's GPU tests (issue 26);
#       direct = the GPU tests of the kernels Inductor launches itself (regrouped on Triton, the older prologues)
#                and of the post-norm epilogue (whole rows only since the exchanges went);
#       BACKENDS, BLOCK_ARGS, BLOCKS and LIMIT (seconds) change the block runs;
#       fuzz = random cases on the Triton kernel until LIMIT - 70 s (issue 29: >= 1000 per family), fuzz_quack
#              on Quack (160 s);
#       pieces = each epilogue piece's cost, beside it the one-MUFU activations and the residual read after the k-loop;
#                their GPU tests; convergence = benchmarks/convergence.py (MODELS=llama or bert: one per call).
#       The block parts run the controls (default_again, norm_fusion_never) beside default and the plugin.
set -o pipefail
if [ "$1" = unpack ]; then bash .cute/a/unpack.sh; exit $?; fi
source .cute/b/install.sh || exit 3
source benchmarks/device_setup.sh
cd /tmp/site
OUT=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee $OUT/gpu.txt
python -c "import importlib.metadata as m; print(*(f'{d} {m.version(d)}' for d in ('quack-kernels', 'nvidia-cutlass-dsl', 'torch', 'triton')))" 2>&1 | tee $OUT/versions.txt
case "$1" in
kernels)
  timeout 400 python -m pytest tests/test_quack_backend.py -q -x -p no:warnings 2>&1 | tail -25 | tee $OUT/tests.log
  (cd benchmarks && timeout 320 python epilogue_gemm.py --rounds 3 --backends triton quack \
     --only 262144x256x1024 131072x512x1024 262144x1024x256 131072x1024x512 16384x4096x28672 \
     --json $OUT/epilogue.json 2>&1 | tee $OUT/epilogue.log)
  ;;
llama_kernels)
  (cd benchmarks && timeout 560 python epilogue_gemm.py --rounds 3 --backends triton quack \
     --only 131072x1024x512 16384x4096x4096 16384x4096x28672 16384x14336x4096 \
     --json $OUT/epilogue_llama.json 2>&1 | tee $OUT/epilogue_llama.log)
  ;;
backward)
  timeout 80 python -m pytest tests/test_regrouped.py -q -x -p no:warnings -k "rms_backward" 2>&1 | tail -15 | tee $OUT/tests_rms_backward.log
  (cd benchmarks && timeout 180 python rms_backward_gemm.py --rounds 3 --only 262144x1024x256 131072x1024x512 \
     --json $OUT/rms_backward.json 2>&1 | tee $OUT/rms_backward.log)
  timeout 140 python tests/fuzz_regrouped.py --cases 1000 --workers 6 --max-m 131072 2>&1 | grep -v "runs its torch reference" | tee $OUT/fuzz.log
  timeout 160 python -m pytest tests/test_quack_backend.py -q -x -p no:warnings -k "model" 2>&1 | tail -15 | tee $OUT/tests_quack_model.log
  ;;
checks)
  timeout 200 python -m pytest tests/test_quack_backend.py -q -x -p no:warnings -k "float16 or model" 2>&1 | tail -25 | tee $OUT/tests.log
  timeout 200 python tests/fuzz_regrouped.py --cases 1000 --workers 6 --max-m 131072 2>&1 | grep -v "runs its torch reference" | tee $OUT/fuzz.log
  timeout 150 python tests/fuzz_regrouped.py --cases 60 --backend quack --workers 6 2>&1 | grep -v "torch reference" | tee $OUT/fuzz_quack.log
  ;;
direct)
  timeout ${DIRECT_LIMIT:-300} python -m pytest tests/test_regrouped.py tests/test_gpu.py tests/test_gpu_post_norm.py -vv \
     -p no:warnings -p no:logging --tb=short --durations=5 -k "${DIRECT_TESTS:-launched_from or stream_is_written or direct_launch or post_norm}" 2>&1 \
     | tee $OUT/tests_direct.log | tail -40
  ;;
qk)
  timeout ${QK_LIMIT:-240} python -m pytest tests/test_regrouped.py -v -x -p no:warnings --durations=5 -k "per_head or qk_norm_and_rope" 2>&1 | tail -25 | tee $OUT/tests_qk.log
  ;;
fuzz)
  timeout ${LIMIT:-540} python tests/fuzz_regrouped.py --cases 4000 --workers 12 --time-limit $(( ${LIMIT:-540} - 70 )) 2>&1 \
     | grep -v "runs its torch reference" | tee $OUT/fuzz.log | grep -v "cases, 0 wrong$"
  ;;
fuzz_quack)
  timeout 220 python tests/fuzz_regrouped.py --cases 200 --backend quack --workers 6 --time-limit 160 2>&1 | grep -v "torch reference" | tee $OUT/fuzz_quack.log
  ;;
bert)
  (cd benchmarks && timeout ${LIMIT:-560} python blocks.py --blocks ${BLOCKS:-bert_base_layer gpt2_medium_layer} --rounds 3 ${BLOCK_ARGS:-} \
     --backends ${BACKENDS:-default norm_fusion default_again norm_fusion_never} --json $OUT/blocks_bert.json 2>&1 | tee $OUT/blocks_bert.log)
  ;;
towers)
  (cd benchmarks && timeout ${LIMIT:-560} python blocks.py --blocks recsys_rms_tower recsys_ln_tower --rounds 3 ${BLOCK_ARGS:-} \
     --backends ${BACKENDS:-default norm_fusion default_again norm_fusion_never} --json $OUT/blocks_towers.json 2>&1 | tee $OUT/blocks_towers.log)
  ;;
llama)
  (cd benchmarks && timeout ${LIMIT:-560} python blocks.py --blocks ${BLOCKS:-llama3_8b_layer qwen3_1p7b_layer} --rounds 3 ${BLOCK_ARGS:-} \
     --backends ${BACKENDS:-default norm_fusion default_again norm_fusion_never} --json $OUT/blocks_llama.json 2>&1 | tee $OUT/blocks_llama.log)
  ;;
pieces)
  timeout 120 python -m pytest tests/test_regrouped.py -q -p no:warnings -k "fast_sigmoid or gelu or cached_launches or load_after_mainloop" 2>&1 | tail -4 | tee $OUT/tests_pieces.log
  timeout 300 python benchmarks/diagnostics/epilogue_configs.py --pieces --variant epilogue_fast_sigmoid epilogue_load_after_mainloop ${SHAPES:-131072x512x1024 262144x256x1024 131072x1024x512 262144x1024x256} \
     2>&1 | tee $OUT/pieces.log | grep -v "^  ("
  ;;
convergence)
  timeout ${LIMIT:-560} python benchmarks/convergence.py --models ${MODELS:-llama} --json $OUT/convergence.json 2>&1 | tee $OUT/convergence.log | grep -v Warning
  ;;
esac
