"""Probe of the prenorm GEMM kernel alone: every (prologue, block config) against cuBLAS and Inductor's norm,
side by side in one run.

    python benchmarks/diagnostics/kernel_probe.py [--json F]

(The --mainloop mode that timed candidate configs — a subtiled epilogue store, two CTAs per SM — and the kernel
options it needed are in commit 0376a52; measured slower on the H200, 2026-11-30, and removed.)
"""
import argparse
import json

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from norm_fusion_inductor.kernels import norm_gemm as kern
from norm_fusion_inductor.timing import interleaved_medians

EPS = 1e-6
SHAPES = [(65536, 1024, 1024), (262144, 256, 256), (16384, 4096, 4096)]


def bench(fns, rounds=2, rep=30):
    """Median of the rounds' medians (norm_fusion_inductor.timing: interleaved, the order reversed every other
    round)."""
    return interleaved_medians(fns, rounds, lambda f: do_bench(f, warmup=10, rep=rep, return_mode="median"))


def _label(c):
    return (f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['num_stages']} w{c['num_warps']} "
            f"g{c['GROUP_M']} flat{int(c['FLATTEN'])}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the timings here")
    args = ap.parse_args()
    configs, shapes = kern._GPU_CONFIGS, SHAPES
    print(torch.cuda.get_device_name(), torch.__version__)
    rows = []
    for M, K, N in shapes:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
        w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
        normed = F.rms_norm(x, (K,), g, EPS)
        ref = torch.mm(normed.double(), w.double().t())
        # static and compiled anew per shape: recompiled for each new shape, the same lambda read 2-7x the norm's
        # bandwidth time at every shape after the first (gluon_probe.py, H200, 2026-11-30); its hidden % was wrong
        torch._dynamo.reset()
        cnorm = torch.compile(lambda x, g: F.rms_norm(x, (K,), g, EPS), dynamic=False)
        cnorm(x, g)
        fns = {"cublas": lambda: torch.mm(normed, w.t()), "inductor_norm": lambda: cnorm(x, g)}
        errors = {}
        for i, c in enumerate(configs):
            for prologue in ("plain", "in_loop", "pre_pass"):
                def f(plan=(prologue, c)):
                    return kern.rms_norm_matmul(x, g, w, None, EPS, plan=plan)
                try:
                    out = f()[0]
                    torch.cuda.synchronize()
                except Exception as e:
                    print(f"  cfg{i} {prologue} failed: {type(e).__name__} {str(e)[:150]}")
                    continue
                if prologue != "plain":  # the plain GEMM runs on raw x: no reference here
                    errors[f"cfg{i}_{prologue}"] = ((out.double() - ref).norm() / ref.norm()).item()
                fns[f"cfg{i}_{prologue}"] = f
        t = bench(fns)
        print(f"\n{M}x{K}x{N}: cublas {t['cublas']:.4f}  inductor_norm {t['inductor_norm']:.4f}  "
              f"unfused {t['cublas'] + t['inductor_norm']:.4f}")
        for i, c in enumerate(configs):
            cells = "  ".join(f"{v} {t[f'cfg{i}_{v}']:.4f}" for v in ("plain", "in_loop", "pre_pass")
                              if f"cfg{i}_{v}" in t)
            worst = max((e for k, e in errors.items() if k.startswith(f"cfg{i}_")), default=float("nan"))
            print(f"  cfg{i} {_label(c)}: {cells}  (plain/cuBLAS "
                  f"{t.get(f'cfg{i}_plain', float('nan')) / t['cublas']:.3f}, err {worst:.1e})")
        rows.append(dict(shape=[M, K, N], times=t, errors=errors))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(configs=[_label(c) for c in configs], rows=rows), fh, indent=1)


if __name__ == "__main__":
    main()
