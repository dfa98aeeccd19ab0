"""Does the selection's short CUDA-graph timer (``timing.graph_ms``) agree with Triton's ``do_bench_cudagraph``
(rep 30 ms), and what does each cost? cuBLAS GEMMs and copies at the block shapes, both timers interleaved over
three rounds; prints each timer's median ms, their ratio and the wall seconds each spent.

    python benchmarks/diagnostics/timer_agreement.py
"""

from __future__ import annotations

import time

import torch
from triton.testing import do_bench_cudagraph

from norm_fusion_inductor.timing import graph_ms

SHAPES = [(262144, 256, 1024), (262144, 1024, 256), (131072, 512, 1024), (8192, 2048, 6144), (8192, 2048, 128),
          (16384, 4096, 4096), (1024, 1024, 1024)]


def main() -> None:
    torch.manual_seed(0)
    cases = {}
    for M, K, N in SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / K**0.5
        cases[f"mm {M}x{K}x{N}"] = lambda a=a, w=w: torch.mm(a, w)
        src = torch.empty(M * N, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        cases[f"copy {M * N * 2 / 1e6:.0f} MB"] = lambda s=src, d=dst: d.copy_(s)
    timers = {"graph_ms": graph_ms, "do_bench_cudagraph": lambda fn: do_bench_cudagraph(fn, rep=30,
                                                                                        return_mode="median")}
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print("| case | graph_ms | do_bench_cudagraph | ratio | wall s (graph_ms / do_bench) |")
    print("|---|---:|---:|---:|---|")
    for name, fn in cases.items():
        ms = {t: [] for t in timers}
        wall = {t: 0.0 for t in timers}
        for r in range(3):
            for t, timer in (timers.items() if r % 2 == 0 else reversed(timers.items())):
                start = time.perf_counter()
                ms[t].append(timer(fn))
                wall[t] += time.perf_counter() - start
        med = {t: sorted(v)[1] for t, v in ms.items()}
        print(f"| {name} | {med['graph_ms']:.4f} | {med['do_bench_cudagraph']:.4f} | "
              f"{med['graph_ms'] / med['do_bench_cudagraph']:.3f} | {wall['graph_ms'] / 3:.3f} / "
              f"{wall['do_bench_cudagraph'] / 3:.3f} |", flush=True)


if __name__ == "__main__":
    main()
