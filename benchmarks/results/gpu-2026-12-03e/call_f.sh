# The convergence check with its learnable task (a Markov chain's next token), Llama only (the session's last
# ~3 device minutes).
source benchmarks/device_setup.sh
cd /tmp/site
timeout 100 python benchmarks/convergence.py --models llama --json $OUT/convergence_markov_llama.json > $OUT/convergence_markov_llama.log 2>&1
grep "^|\|PASS\|FAIL\|learned" $OUT/convergence_markov_llama.log | tail -6
