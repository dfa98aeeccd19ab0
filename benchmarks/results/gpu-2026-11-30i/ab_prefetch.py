"""A/B of the Gluon kernels before and after the epilogue-vector prefetch (2026-11-30, seventh session):
norm_gemm_gluon_base is the module at commit 08edf91 with its op renamed (copied in for this run only).
Kernel launches alone, the weight prepared once; every variant's output checked against the other's.

    python benchmarks/results/gpu-2026-11-30i/ab_prefetch.py
"""
import statistics
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from norm_fusion_inductor.kernels import norm_gemm as tri
from norm_fusion_inductor.kernels import norm_gemm_gluon as new
from norm_fusion_inductor.kernels import norm_gemm_gluon_base as base

EPS = 1e-6
SHAPES = [(262144, 256, 1024), (262144, 512, 1024), (65536, 1024, 1024), (262144, 256, 512), (65536, 2048, 256),
          (65536, 1024, 256)]
for M, K, N in SHAPES:
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
    b = (0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    w_eff = tri._fold(w, g)
    u = w_eff.sum(1, dtype=torch.float32)
    v = tri._fold_bias(w, b, bias)
    rstd = torch.empty(M, device="cuda", dtype=torch.float32)
    mean = torch.empty(M, device="cuda", dtype=torch.float32)
    tri._row_stats(x, rstd, mean, EPS)
    fns, outs = {}, {}
    for label, cfg in (("cfg0", new.CONFIGS[0]), ("ws0", new.WS_CONFIGS[0])):
        for name, mod in (("base", base), ("new", new)):
            for variant, kw in (("plain+bias", dict(bias=bias)),
                                ("rms", dict(row_stats=mod.RMS_STATS, bias=bias, rstd=torch.empty_like(rstd), eps=EPS,
                                             write_stats=True)),
                                ("ln", dict(row_stats=mod.LN_STATS, bias=v, rstd=torch.empty_like(rstd),
                                            mean=torch.empty_like(mean), u=u, eps=EPS, write_stats=True)),
                                ("ln pre_pass", dict(row_scale=True, bias=v, rstd=rstd, mean=mean, u=u, eps=EPS))):
                out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                key = f"{label} {variant} {name}"
                fns[key] = lambda mod=mod, cfg=cfg, kw=kw, out=out: mod.launch(x, w_eff, out, cfg, **kw)
                fns[key]()
                outs[key] = out
    t = {k: [] for k in fns}
    for _ in range(3):
        for k, f in fns.items():
            t[k].append(do_bench(f, warmup=10, rep=40, return_mode="median"))
    mm = do_bench(lambda: F.linear(x, w, bias), warmup=10, rep=40, return_mode="median")
    print(f"\n{M}x{K}x{N}: cuBLAS linear {mm:.4f}")
    for k in fns:
        if k.endswith("new"):
            kb = k[:-3] + "base"
            tn, tb = statistics.median(t[k]), statistics.median(t[kb])
            diff = ((outs[k].float() - outs[kb].float()).norm() / outs[kb].float().norm()).item()
            print(f"  {k[:-4]:22s} base {tb:.4f}  new {tn:.4f}  new/base {tn / tb:.3f}  ({tn / mm:.3f}x cuBLAS)"
                  f"  out diff {diff:.1e}  nan {int(outs[k].isnan().sum())}", flush=True)
