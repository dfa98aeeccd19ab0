# The Quack kit's first half (carry .cute/a); call_b must follow on the same warm machine (carry .cute/b).
bash benchmarks/quack_round.sh unpack
