# Triton alone. 1. The regrouped GPU tests touched this session (GELU over a wide range now on the GPU, the
# one-MUFU activations and the residual read after the k-loop now the defaults). 2. Where training's peak memory
# goes under each compiler (convergence.py's models: the plugin read 1.23x / 1.68x default's peak).
source benchmarks/device_setup.sh
cd /tmp/site
timeout 100 python -m pytest tests/test_regrouped.py -q -p no:warnings -k "fast_sigmoid or gelu or load_after_mainloop or every_block_config" -rf --tb=line 2>&1 | grep -v "^\.\|^s" | tail -6 | tee $OUT/tests.log
timeout $((580 - SECONDS)) python benchmarks/diagnostics/train_memory.py --models llama bert > $OUT/train_memory.log 2>&1
grep -v Warn $OUT/train_memory.log | tail -14
