# The model fuzz's first GPU run (tests/fuzz_models.py: random pre-/post-norm stacks through the backend, policy
# always, against float64 and eager), with the session's last device minutes.
source benchmarks/device_setup.sh
cd /tmp/site
timeout 140 python tests/fuzz_models.py --cases 600 --workers 12 --time-limit 95 > $OUT/fuzz_models.log 2>&1; echo "rc $?" >> $OUT/fuzz_models.log
grep -v "Warning\|warnings.warn\|cases, 0 wrong$" $OUT/fuzz_models.log | tail -40 | cut -c1-400
