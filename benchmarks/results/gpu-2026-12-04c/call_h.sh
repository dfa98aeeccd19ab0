# The Quack kit's first half again (carry .cute/a).
bash benchmarks/quack_round.sh unpack
