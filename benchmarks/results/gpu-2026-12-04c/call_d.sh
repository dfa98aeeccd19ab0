# The Quack kit's first half (carry .cute/a).
bash benchmarks/quack_round.sh unpack
