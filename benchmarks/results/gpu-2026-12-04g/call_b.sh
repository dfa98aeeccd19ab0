# Thirty-fifth session, second call: the failing test alone, survey on, with what each measurement returns
# (-p survey_debug), then alone with the survey off.
source benchmarks/device_setup.sh
OUT=${OUT:-/tmp/out}
SECONDS=0
export PYTHONPATH=$PWD/benchmarks/results/gpu-2026-12-04g:$PYTHONPATH
timeout 150 python -m pytest tests/test_regrouped.py -q -s -p no:cacheprovider -p survey_on -p survey_debug \
  -k "test_triton_gemms_launched_from_inductor_code and False-False" > $OUT/survey_on.log 2>&1
echo "== alone, survey on (rc $?, ${SECONDS} s)"; tail -1 $OUT/survey_on.log | cut -c1-200
grep -h "^\[measure\]\|^  lookup\|^  tuned" $OUT/survey_on.log | cut -c1-700 | head -30
timeout 100 python -m pytest tests/test_regrouped.py -q -p no:cacheprovider \
  -k "test_triton_gemms_launched_from_inductor_code and False-False" > $OUT/survey_off.log 2>&1
echo "== alone, survey off (rc $?, ${SECONDS} s)"; tail -1 $OUT/survey_off.log | cut -c1-200
