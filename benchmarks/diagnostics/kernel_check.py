"""Every (prologue, block config) of the prenorm kernel against float64, one line each: finds a config- or
variant-specific miscompile that an autotuned test would hide behind whichever plan won.

    python benchmarks/diagnostics/kernel_check.py [--norm ln|rms] [--dtype bfloat16] [--shape 4096x1024x768]
"""

import argparse
import sys

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from tests.helpers import ln_linear_reference64, rel_err, rms_linear_reference64  # noqa: E402

from norm_fusion_inductor.kernels import norm_gemm as kern  # noqa: E402
from norm_fusion_inductor.kernels import norm_gemm_gluon  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--norm", default="ln")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--shape", default="4096x1024x768")
    p.add_argument("--shift", type=float, default=0.0)
    args = p.parse_args()
    M, K, N = (int(v) for v in args.shape.split("x"))
    dt = getattr(torch, args.dtype)
    torch.manual_seed(0)
    x = (torch.randn(M, K, device="cuda") + args.shift).to(dt)
    g = (torch.rand(K, device="cuda") + 0.5).to(dt)
    beta = torch.randn(K, device="cuda").to(dt)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(dt)
    bias = torch.randn(N, device="cuda").to(dt)
    for gamma in (g, None):
        for prologue in kern.ALL_PROLOGUES:
            # every config, also those _candidate_plans leaves out (to re-check a known miscompile); the Gluon
            # mainloop's where it can run the operands at all
            if prologue.startswith(kern.GLUON):
                configs = [c for c in norm_gemm_gluon.CONFIGS if norm_gemm_gluon.unsupported_reason(
                    dt, x.device, K, c, prologue.removeprefix(kern.GLUON), args.norm == "ln") is None]
            elif dt == torch.float32:
                configs = [dict(c, BLOCK_K=32) for c in kern._GPU_CONFIGS]
            else:
                configs = kern._GPU_CONFIGS
            for cfg in configs:
                plan = (prologue, cfg)
                try:
                    if args.norm == "ln":
                        out, mean, rstd = kern.layer_norm_matmul(x, gamma, beta, w, bias, 1e-5, plan=plan)
                        ref, rmean, rrstd = ln_linear_reference64(x, gamma, beta, w, bias, 1e-5)
                        stats = f"mean {rel_err(mean, rmean.flatten()):.1e} rstd {rel_err(rstd, rrstd.flatten()):.1e}"
                    else:
                        out, rstd = kern.rms_norm_matmul(x, gamma, w, bias, 1e-6, plan=plan)
                        ref, rrstd = rms_linear_reference64(x, gamma, w, bias, 1e-6)
                        stats = f"rstd {rel_err(rstd, rrstd.flatten()):.1e}"
                    short = {k: v for k, v in cfg.items()
                             if k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "FLATTEN", "NUM_BUFFERS")}
                    print(f"{args.norm} {args.shape} shift={args.shift} gamma={gamma is not None} {prologue} {short}: "
                          f"out {rel_err(out, ref):.1e} {stats}", flush=True)
                except Exception as e:
                    print(f"{args.norm} {prologue} {plan[1]}: {type(e).__name__} {str(e)[:100]}", flush=True)


if __name__ == "__main__":
    main()
