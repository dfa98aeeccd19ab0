# After `bash benchmarks/quack_round.sh unpack` (carry .cute/a); this call carries .cute/b.
# 1. The regrouped GPU tests (the Triton epilogue GEMM now launched through the cached launcher; the op declared
#    without custom_op's layers). 2. Host µs per op call after both. 3. Every block config of the Triton epilogue
#    GEMM, warp-specialized variants included, at the tower and Llama shapes.
source .cute/b/install.sh >/dev/null 2>&1 || exit 3
source benchmarks/device_setup.sh
cd /tmp/site
timeout 230 python -m pytest tests/test_regrouped.py -q -x -p no:warnings 2>&1 | tail -6 > $OUT/tests.log
cat $OUT/tests.log
timeout 150 python benchmarks/diagnostics/epilogue_host.py 16384x2048x2048 262144x256x1024 --calls 100 > $OUT/epilogue_host.log 2>&1
head -12 $OUT/epilogue_host.log
timeout 200 python benchmarks/diagnostics/epilogue_configs.py > $OUT/epilogue_configs.log 2>&1
cat $OUT/epilogue_configs.log | cut -c1-150
