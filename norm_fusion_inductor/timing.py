"""Side-by-side timing: every variant timed in each round, the rounds interleaved, the median kept.

The order is reversed every other round: with one fixed order the default timed early in each round read up to
13 % faster than its recompiled control timed last (RMS sweep, H200, 2026-11-30: 1.720 vs 1.951 ms at
262144×1024×2048); whether the position or the compile made it is not known, and the reversal takes the
position's share out of every variant alike.
"""

from __future__ import annotations

import statistics
from typing import Callable


def interleaved_medians(fns: dict, rounds: int, time_one: Callable) -> dict:
    """{name: median over ``rounds`` of time_one(fn)}, the functions interleaved, the order reversed every other
    round."""
    times = {name: [] for name in fns}
    for r in range(rounds):
        for name, fn in (fns.items() if r % 2 == 0 else reversed(fns.items())):
            times[name].append(time_one(fn))
    return {name: statistics.median(t) for name, t in times.items()}
