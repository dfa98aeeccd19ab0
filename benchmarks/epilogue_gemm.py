"""The epilogue GEMM alone: cuBLAS, the plain kernel and each epilogue of the regrouped chains, side by side in
one process (do_bench medians, interleaved), bf16 on the GPU.

    python benchmarks/epilogue_gemm.py [--json out.json]

For each M×K×N: cuBLAS (torch.mm), the kernel with no epilogue, a consumer (RMSNorm row scale; LayerNorm row
scale and mean correction + GELU), a training consumer that also stores the pre-activation, the producers
(residual + RMSNorm statistics; bias + residual + LayerNorm statistics), and the gated SwiGLU consumer (N = 2 ×
the output width), on each backend asked for (``--backends triton quack``; Quack's plain GEMM then too). The
ratio to cuBLAS is the number that matters: a chain is only as fast as its GEMMs.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time

import torch

from norm_fusion_inductor import regrouped
from norm_fusion_inductor.kernels import epilogue_gemm as eg
from norm_fusion_inductor.kernels import quack_epilogue_gemm as qg
from norm_fusion_inductor.timing import interleaved_medians

SHAPES = [(262144, 256, 1024), (131072, 1024, 512), (65536, 1024, 1024), (16384, 4096, 4096),
          (16384, 4096, 28672), (16384, 14336, 4096)]
# name -> (epilogue, gemm width factor): the gated consumer's N is twice the output width
EPILOGUES = {
    "plain": eg.Epilogue(),
    "rms_consumer": eg.Epilogue(row_norm="rms"),
    "ln_gelu_consumer": eg.Epilogue(row_norm="ln", bias=True, activation="gelu"),
    "ln_gelu_consumer_aux": eg.Epilogue(row_norm="ln", bias=True, activation="gelu", write_aux=True),
    "producer_rms_stats": eg.Epilogue(residual=True, stats="rms"),
    "producer_ln_stats": eg.Epilogue(bias=True, residual=True, stats="ln"),
    "swiglu_consumer": eg.Epilogue(row_norm="rms", activation="silu_mul"),
}


def cases(M, K, N, dev, dt, backends=("triton",), names=tuple(EPILOGUES)):
    a = torch.randn(M, K, device=dev, dtype=dt)
    w = torch.randn(N, K, device=dev, dtype=dt) / K ** 0.5
    r = torch.randn(M, N, device=dev, dtype=dt)
    b = torch.randn(N, device=dev, dtype=torch.float32)
    s = torch.rand(M, device=dev) + 0.5
    u = torch.randn(N, device=dev)
    wt = w.t()
    fns = {"cublas": lambda: torch.mm(a, wt)}
    if "quack" in backends and qg.missing_reason() is None:
        from quack.gemm_interface import gemm as quack_gemm

        fns["quack_gemm"] = lambda: quack_gemm(a, wt)
    for backend in backends:
        for name in names:
            e = EPILOGUES[name]
            if backend == "quack" and qg.unsupported_reason(a, w, False, e) is not None:
                continue
            fns[f"{backend}:{name}"] = functools.partial(
                regrouped.epilogue_gemm, a, w, b if e.bias else None, r if e.residual else None,
                s if e.row_norm != "none" else None, s if e.row_norm == "ln" else None,
                u if e.row_norm == "ln" else None, e.row_norm, e.activation, e.write_aux, e.stats, False,
                backend=backend)
    return fns


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--shapes", type=int, default=len(SHAPES), help="only the first N shapes")
    p.add_argument("--only", nargs="*", help="shapes as MxKxN (default: SHAPES)")
    p.add_argument("--backends", nargs="+", default=["triton"], choices=["triton", "quack"])
    p.add_argument("--epilogues", nargs="+", default=list(EPILOGUES), choices=list(EPILOGUES))
    args = p.parse_args()
    from triton.testing import do_bench

    rows = []
    shapes = [tuple(int(v) for v in x.split("x")) for x in args.only] if args.only else SHAPES[:args.shapes]
    for M, K, N in shapes:
        fns = cases(M, K, N, "cuda", torch.bfloat16, args.backends, args.epilogues)
        first_call_s = {}
        for name, fn in fns.items():  # tune and compile first
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            first_call_s[name] = time.perf_counter() - start
        print(f"first calls (compile, tune) at {M}x{K}x{N}:",
              ", ".join(f"{n} {s:.1f} s" for n, s in first_call_s.items() if s > 0.5), flush=True)
        if regrouped.QUACK_FAILED:
            print("Quack failed:", *regrouped.QUACK_FAILED.values(), sep="\n  ")
        t = interleaved_medians(fns, args.rounds, lambda fn: do_bench(fn, warmup=10, rep=50, return_mode="median"))
        print(f"\n{M}×{K}×{N}: ms (× cuBLAS)")
        for n, ms in t.items():
            print(f"  {n:32s} {ms:.4f} ({ms / t['cublas']:.2f})", flush=True)
        rows.append(dict(shape=(M, K, N), first_call_s=first_call_s, **t))
        del fns
        torch.cuda.empty_cache()
    print("\nchosen configs (M bucket, N, K, dtype, w_kn, epilogue) -> config:", eg.tuned_configs(), sep="\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
