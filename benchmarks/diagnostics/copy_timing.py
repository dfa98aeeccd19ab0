"""The copy the selection's lower bound times, measured three ways (GPU): is a captured copy_ slower?

    python benchmarks/diagnostics/copy_timing.py
"""
import torch
from triton.testing import do_bench, do_bench_cudagraph

for m, n in ((262144, 2048), (262144, 1024), (65536, 256)):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    fns = {"copy_": lambda: y.copy_(x), "neg(out=)": lambda: torch.neg(x, out=y),
           "mul(1, out=)": lambda: torch.mul(x, 1, out=y)}
    gb = 2 * x.numel() * x.element_size() / 1e9
    for _ in range(2):
        cells = []
        for name, f in fns.items():
            g = do_bench_cudagraph(f, rep=30, return_mode="median")
            e = do_bench(f, warmup=10, rep=30, return_mode="median")
            cells.append(f"{name} graph {g:.4f} ({gb / g:.2f} TB/s) eager {e:.4f}")
        print(f"{m}x{n}: " + " | ".join(cells), flush=True)
