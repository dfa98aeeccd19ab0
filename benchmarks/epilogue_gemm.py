"""The epilogue GEMM alone: cuBLAS, the plain kernel and each epilogue of the regrouped chains, side by side in
one process (do_bench medians, interleaved), bf16 on the GPU.

    python benchmarks/epilogue_gemm.py [--json out.json]

For each M×K×N: cuBLAS (torch.mm), the kernel with no epilogue, a consumer (RMSNorm row scale; LayerNorm row
scale and mean correction + GELU), a training consumer that also stores the pre-activation, the producer (bias +
residual + LayerNorm partial statistics), and the gated SwiGLU consumer (N = 2 × the output width). The ratio to
cuBLAS is the number that matters: a chain is only as fast as its GEMMs.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from norm_fusion_inductor import regrouped
from norm_fusion_inductor.timing import interleaved_medians

SHAPES = [(262144, 256, 1024), (131072, 1024, 512), (65536, 1024, 1024), (16384, 4096, 4096),
          (16384, 4096, 28672), (16384, 14336, 4096)]



def cases(M, K, N, dev, dt):
    a = torch.randn(M, K, device=dev, dtype=dt)
    w = torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5
    r = torch.randn(M, N, device=dev, dtype=dt)
    b = torch.randn(N, device=dev, dtype=torch.float32)
    s = torch.rand(M, device=dev) + 0.5
    u = torch.randn(N, device=dev)
    op = regrouped.epilogue_gemm
    wt = w.t()
    return {
        "cublas": lambda: torch.mm(a, wt),
        "plain": lambda: op(a, w, None, None, None, None, None, "none", "none", False, "none", False),
        "rms_consumer": lambda: op(a, w, None, None, s, None, None, "rms", "none", False, "none", False),
        "ln_gelu_consumer": lambda: op(a, w, b, None, s, s, u, "ln", "gelu", False, "none", False),
        "ln_gelu_consumer_aux": lambda: op(a, w, b, None, s, s, u, "ln", "gelu", True, "none", False),
        "producer_ln_stats": lambda: op(a, w, b, r, None, None, None, "none", "none", False, "ln", False),
        "swiglu_consumer": lambda: op(a, w, None, None, s, None, None, "rms", "silu_mul", False, "none", False),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--shapes", type=int, default=len(SHAPES), help="only the first N shapes")
    args = p.parse_args()
    from triton.testing import do_bench

    rows = []
    names = None
    for M, K, N in SHAPES[:args.shapes]:
        fns = cases(M, K, N, "cuda", torch.bfloat16)
        for fn in fns.values():
            fn()  # tune and compile first
        t = interleaved_medians(fns, args.rounds, lambda fn: do_bench(fn, warmup=10, rep=50, return_mode="median"))
        if names is None:
            names = list(t)
            print("| M×K×N | " + " | ".join(f"{n} ms (×cuBLAS)" for n in names) + " |")
            print("|---|" + "---:|" * len(names))
        print(f"| {M}×{K}×{N} | " + " | ".join(f"{t[n]:.4f} ({t[n] / t['cublas']:.2f})" for n in names) + " |",
              flush=True)
        rows.append(dict(shape=(M, K, N), **t))
        del fns
        torch.cuda.empty_cache()
    from norm_fusion_inductor.kernels import epilogue_gemm as eg

    print("\nchosen configs (M bucket, N, K, dtype, w_kn, epilogue) -> config:")
    for key, cfg in eg._TUNED.items():
        print(f"  {key[:5]} {key[5]} -> {cfg}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
