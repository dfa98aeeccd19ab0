# The Quack kit's first half again (carry .cute/a; the machine of call_d was given back).
bash benchmarks/quack_round.sh unpack
