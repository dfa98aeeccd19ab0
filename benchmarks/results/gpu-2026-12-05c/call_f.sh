# Forty-second session, sixth call (H100): both fuzzers on the GPU with this session's forms drawn (the partial
# and interleaved RoPE, output gates between heads; the models' gated q), one block config drawn per case.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
python tests/fuzz_regrouped.py --cases 3000 --workers 12 --time-limit 130 --seed 4205 > $OUT/fuzz_regrouped.log 2>&1
echo "== kernel fuzz (rc $?, ${SECONDS} s)"; grep -v "Warning\|warn" $OUT/fuzz_regrouped.log | grep -v "^ \{6\}[0-9]" | tail -12 | cut -c1-300
python tests/fuzz_models.py --cases 150 --workers 12 --time-limit 150 --seed 4206 > $OUT/fuzz_models.log 2>&1
echo "== model fuzz (rc $?, ${SECONDS} s)"; grep -v "Warning\|warn\|^W1" $OUT/fuzz_models.log | grep "cases\|Error\|error\|stopped" | tail -12 | cut -c1-300
