"""Does the selection's timing condition change the ratio it decides on? The epilogue GEMMs of a Llama-3-8B layer
(RMSNorm consumer, SwiGLU consumer, producer) and cuBLAS timed four ways, side by side in one process:

- ``graph``: ``do_bench_cudagraph`` (what the selection uses), ``plain``: ``do_bench`` (launches, L2 flushed);
- ``randn``: operands ~ N(0, 1) and W ~ N(0, 1/K) (the selection's), ``model``: W ~ N(0, 0.02²) as transformers
  initializes it and a unit-RMS activation.

The block benchmark's profile measured the GEMMs of the layer 5–10 % faster inside the compiled step than the
selection did alone, and the Quack/cuBLAS ratio differently; this names which condition moves it.

    python benchmarks/diagnostics/timing_conditions.py [--backends triton quack] [--json out.json]
"""

from __future__ import annotations

import argparse
import json

import torch

from norm_fusion_inductor import regrouped
from norm_fusion_inductor.timing import interleaved_medians

SHAPES = {"q_proj": (16384, 4096, 4096), "gate_up": (16384, 4096, 28672), "o_proj": (16384, 4096, 4096)}
EPILOGUE = {"q_proj": ("rms", "none", "none", False), "gate_up": ("rms", "silu_mul", "none", False),
            "o_proj": ("none", "none", "rms", True)}  # row_norm, activation, stats, residual


def operands(M, K, N, data: str):
    dev, dt = "cuda", torch.bfloat16
    a = torch.randn(M, K, device=dev, dtype=dt)
    w = torch.randn(N, K, device=dev, dtype=dt) * (0.02 if data == "model" else K ** -0.5)
    scale = torch.rand(M, device=dev) + 0.5
    residual = torch.randn(M, N, device=dev, dtype=dt)
    return a, w, scale, residual


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", nargs="+", default=["triton", "quack"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json")
    args = p.parse_args()
    from triton.testing import do_bench, do_bench_cudagraph

    benches = {"graph": lambda fn: do_bench_cudagraph(fn, rep=30, return_mode="median"),
               "plain": lambda fn: do_bench(fn, rep=50, return_mode="median")}
    rows = []
    for name, (M, K, N) in SHAPES.items():
        row_norm, activation, stats, has_residual = EPILOGUE[name]
        for data in ("randn", "model"):
            a, w, scale, residual = operands(M, K, N, data)
            fns = {"cublas": lambda a=a, w=w: torch.mm(a, w.t())}
            for backend in args.backends:
                fns[backend] = (lambda backend=backend, a=a, w=w, scale=scale, residual=residual:
                                regrouped.epilogue_gemm(a, w, None, residual if has_residual else None,
                                                        scale if row_norm != "none" else None, None, None, row_norm,
                                                        activation, False, stats, False, backend=backend))
            for fn in fns.values():
                fn()  # tunes / JIT-compiles outside the timing
            torch.cuda.synchronize()
            for how, bench in benches.items():
                t = interleaved_medians(fns, args.rounds, bench)
                row = {"gemm": name, "shape": [M, K, N], "data": data, "timing": how, **t}
                rows.append(row)
                ratios = "  ".join(f"{b}/cuBLAS {t[b] / t['cublas']:.3f}" for b in args.backends)
                print(f"{name:8s} {M}x{K}x{N} {data:5s} {how:5s} cuBLAS {t['cublas']:.4f} ms  "
                      + "  ".join(f"{b} {t[b]:.4f}" for b in args.backends) + f"  {ratios}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
