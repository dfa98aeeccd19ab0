"""Probe of the prenorm GEMM kernel alone: every (prologue, block config) against cuBLAS and Inductor's norm,
side by side in one run.

    python benchmarks/kernel_probe.py
"""
import statistics

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from norm_fusion_inductor.kernels import norm_gemm as kern

EPS = 1e-6
SHAPES = [(65536, 1024, 1024), (262144, 256, 256), (16384, 4096, 4096)]


def bench(fns, rounds=2):
    t = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t[k].append(do_bench(f, warmup=10, rep=30, return_mode="median"))
    return {k: statistics.median(v) for k, v in t.items()}


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    for M, K, N in SHAPES:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
        w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
        normed = F.rms_norm(x, (K,), g, EPS)
        cnorm = torch.compile(lambda x, g: F.rms_norm(x, (K,), g, EPS))
        cnorm(x, g)
        fns = {"cublas": lambda: torch.mm(normed, w.t()), "inductor_norm": lambda: cnorm(x, g)}
        for i, c in enumerate(kern._GPU_CONFIGS):
            for prologue in ("plain", "in_loop", "pre_pass"):
                def f(plan=(prologue, c)):
                    return kern.rms_norm_matmul(x, g, w, None, EPS, plan=plan)
                try:
                    f()
                    torch.cuda.synchronize()
                except Exception as e:
                    print(f"  cfg{i} {prologue} failed: {type(e).__name__} {str(e)[:150]}")
                    continue
                fns[f"cfg{i}_{prologue}"] = f
        t = bench(fns)
        print(f"\n{M}x{K}x{N}: cublas {t['cublas']:.4f}  inductor_norm {t['inductor_norm']:.4f}  "
              f"unfused {t['cublas'] + t['inductor_norm']:.4f}")
        for i, c in enumerate(kern._GPU_CONFIGS):
            cells = "  ".join(f"{v} {t[f'cfg{i}_{v}']:.4f}" for v in ("plain", "in_loop", "pre_pass")
                              if f"cfg{i}_{v}" in t)
            print(f"  cfg{i} {c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['num_stages']} w{c['num_warps']} "
                  f"flat{int(c['FLATTEN'])}: {cells}")


if __name__ == "__main__":
    main()
