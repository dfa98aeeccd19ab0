# Triton alone (no Quack kit). Convergence (issue 29): benchmarks/convergence.py, a Llama-style and a BERT model
# trained 200 steps with AdamW in bf16 under default, the plugin and the plugin with policy always.
source benchmarks/device_setup.sh
cd /tmp/site
timeout 330 python benchmarks/convergence.py --models llama --json $OUT/convergence_llama.json > $OUT/convergence_llama.log 2>&1
grep -v Warning $OUT/convergence_llama.log | tail -8
timeout $((575 - SECONDS)) python benchmarks/convergence.py --models bert --json $OUT/convergence_bert.json > $OUT/convergence_bert.log 2>&1
grep -v Warning $OUT/convergence_bert.log | tail -8
# The calibrate command (issue 27), quick grid, Triton alone, into $OUT (not the cache folder)
timeout $((590 - SECONDS)) python -m norm_fusion_inductor calibrate --quick --backends triton --out $OUT/calibration_quick.json > $OUT/calibrate.log 2>&1
tail -20 $OUT/calibrate.log
