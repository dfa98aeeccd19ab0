# call_d's shared GPU ran out of memory instead. Is memory pressure what turns BERT's loss NaN? bert_nan.py with
# the process's memory capped (2.0 and 3.0 GB; the plugin's training step peaks at 1.4 GB).
source benchmarks/device_setup.sh
cd /tmp/site
for cap in 2.0 3.0; do
  timeout 150 python benchmarks/results/gpu-2026-12-03f/bert_nan.py 4 auto-first quiet noconfigs cap=$cap 2>&1 | grep -v "Warning\|warnings.warn" > $OUT/bert_nan_cap$cap.log
  echo "cap $cap"; grep -v "^  site" $OUT/bert_nan_cap$cap.log | cut -c1-300 | grep -v "^  File\|^    " | tail -14
done
