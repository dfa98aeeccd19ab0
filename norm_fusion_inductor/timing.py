"""Side-by-side timing: every variant timed in each round, the rounds interleaved, the median kept.

The order is reversed every other round: with one fixed order the default timed early in each round read
markedly faster than its recompiled control timed last; whether the position or the compile made it is not
known, and the reversal takes the position's share out of every variant alike
(docs/decisions.md#timinginterleaved_medians).
"""

from __future__ import annotations

import statistics
from typing import Callable, Optional

from .report import clocked


def sm_copy(dst, src):
    """dst ← −src: the bytes of a copy, moved by the SMs, as the selection times a copy (a ``copy_`` captured in a
    CUDA graph runs on the copy engines instead)."""
    import torch

    return torch.neg(src, out=dst)


def interleaved_medians(fns: dict, rounds: int, time_one: Callable) -> dict:
    """{name: median over ``rounds`` of time_one(fn)}, the functions interleaved, the order reversed every other
    round."""
    times = {name: [] for name in fns}
    for r in range(rounds):
        for name, fn in (fns.items() if r % 2 == 0 else reversed(fns.items())):
            times[name].append(time_one(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def graph_ms(fn: Callable, budget_ms: float = 6.0, replays: int = 5, max_calls: int = 200) -> float:
    """GPU ms of one call of ``fn``: the median of ``replays`` replays of one CUDA graph of n calls, n chosen so
    that a replay lasts about ``budget_ms`` (1 ≤ n ≤ max_calls), on a side stream. Graph replay takes the host
    out (the pass runs inside Inductor's compile, where the Python dispatcher makes eager calls slow). Triton's
    ``do_bench_cudagraph(rep=r)`` replays its graph ten times for r ms each (330 ms at r = 30) and captures
    r ms worth of calls: about ten times this one's GPU time, and, for a Python-heavy call, its capture's host time
    too; the selection calls the timer a dozen times per site."""
    with clocked("GPU timing"):
        return _graph_ms(fn, budget_ms, replays, max_calls)


def _graph_ms(fn: Callable, budget_ms: float, replays: int, max_calls: int) -> float:
    import torch

    stream = _side_stream(torch.cuda.current_device())
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        fn()
        start.record()
        for _ in range(3):
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = start.elapsed_time(end) / 3
        calls = max(1, min(max_calls, int(budget_ms / max(estimate, 1e-4))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        times = []
        for _ in range(replays):
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / calls)
    del graph
    release_cublas_workspaces()
    return statistics.median(times)


_SIDE_STREAMS: dict = {}


def _side_stream(device_index: int):
    """One timing stream per device for the process: cuBLAS keeps a workspace per (handle, stream) that outlives
    the stream, so a new stream per timing would leave one more workspace allocated each time."""
    import torch

    if device_index not in _SIDE_STREAMS:
        _SIDE_STREAMS[device_index] = torch.cuda.Stream(device_index)
    return _SIDE_STREAMS[device_index]


def release_cublas_workspaces() -> None:
    """Free the cuBLAS workspaces the timings allocated. They are allocated through the caching allocator and
    counted in ``torch.cuda.memory_allocated`` until freed (``empty_cache`` does not), so whatever the timings
    leave would count in the user's peak memory for the rest of the process. Any stream's workspace is allocated
    again on its next cuBLAS call."""
    import torch

    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None and torch.cuda.is_available():
        torch.cuda.synchronize()
        clear()


def host_ms(fn: Callable, calls: int = 10, batches: int = 5, sync: Optional[Callable] = None) -> float:
    """Host time per call of ``fn`` (ms): the median over ``batches`` of ``calls`` calls queued without waiting
    for the GPU, which runs behind (a single batch of 20 calls read anywhere from 0.16 to 0.38 ms for one plan
    across the small sites of the H200 LayerNorm sweep). The Python dispatcher that Inductor's compile turns on is
    turned off meanwhile: it made eager calls look 2.5x slower than they run, and the compiled graph does not run
    under it."""
    import time

    import torch
    from torch._dispatch.python import no_python_dispatcher

    sync = sync or torch.cuda.synchronize
    per_batch = []
    with no_python_dispatcher(), clocked("GPU timing"):
        fn()
        sync()
        for _ in range(batches):
            begin = time.perf_counter()
            for _ in range(calls):
                fn()
            per_batch.append((time.perf_counter() - begin) / calls * 1e3)
            sync()
    return statistics.median(per_batch)
