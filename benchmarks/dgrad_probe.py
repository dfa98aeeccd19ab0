"""Where the fused backward's dgrad kernel (norm_gemm.norm_backward_dgrad) spends its time, per plan (GPU):
the whole kernel, without its column sums (dγ, dβ), with dβ from (Σ dY)·W instead (LayerNorm), the same
mainloop with no epilogue (dn = dY·W written out), cuBLAS, and the host time per call.

    python benchmarks/dgrad_probe.py --norm ln --shapes 65536x1024x1024 65536x2048x256

Shapes are M×K×N of the forward (x [M, K], W [N, K]): the dgrad's output is [M, K], its reduction runs over N.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from triton.testing import do_bench

from norm_fusion_inductor.kernels import norm_gemm
from norm_fusion_inductor.selection import _host_ms as host_ms

from backward import norm_backward_from_dn  # benchmarks/, this script's folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", default=["65536x1024x1024", "65536x2048x256", "65536x256x2048"])
    p.add_argument("--norm", choices=["rms", "ln"], default="ln")
    p.add_argument("--more", action="store_true", help="also smaller block configs; no mainloop-only rows")
    args = p.parse_args()
    ln = args.norm == "ln"
    for shape in args.shapes:
        M, K, N = (int(v) for v in shape.split("x"))
        dy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(N, K, device="cuda") / K**0.5).bfloat16()
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        gamma = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
        var, mu = torch.var_mean(x.float(), -1, correction=0)
        rstd = torch.rsqrt(var + 1e-6)
        mean = mu if ln else None
        dn = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
        fns = {"cuBLAS dY·W": lambda: torch.mm(dy, w)}
        plans = norm_gemm._post_candidate_plans(x, K)
        if args.more:
            # smaller tiles: no register spills in the epilogue (offline sm_90 compile, ptxas -v); two stages:
            # shared memory the mainloop does not hold is the epilogue's room for its layout conversions
            for bm, bn, warps, stages in ((64, 256, 8, 3), (64, 128, 8, 3), (128, 64, 8, 3), (64, 64, 4, 3),
                                          (128, 256, 8, 2), (128, 128, 8, 2)):
                exchange = "row" if K <= bn else "spin"
                plans.append((exchange, dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, GROUP_M=8, num_stages=stages,
                                             num_warps=warps, WARP_SPECIALIZE=False, FLATTEN=False)))
        for plan in plans:
            cfg = plan[1]
            name = f"{plan[0]} {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['num_stages']}"
            variants = {"": {}, " no column sums": dict(col_sums=False)}
            if ln:
                variants[" dβ from dY"] = dict(dbeta_from_dy=True)
            for suffix, options in variants.items():
                fns[name + suffix] = lambda plan=plan, options=options: norm_gemm.norm_backward_dgrad(
                    dy, w, x, rstd, mean, gamma, layer_norm=ln, plan=plan, **options)
            if not args.more:
                fns[name + " mainloop only"] = lambda cfg=cfg: norm_gemm._launch(dy, w, dn, None, None, None, 0.0,
                                                                                 cfg, w_kn=True)
        # dx of each plan against fp32 torch (fresh outputs each call: nothing to poison)
        dx_ref = norm_backward_from_dn(dy.float() @ w.float(), x.float(), rstd[:, None],
                                       mu[:, None] if ln else None, gamma)[0]
        errors = {}
        for k, fn in fns.items():
            if "mainloop" not in k and "cuBLAS" not in k:
                errors[k] = ((fn()[0].float() - dx_ref).norm() / dx_ref.norm()).item()
        times = {k: [] for k in fns}
        for _ in range(3):
            for k, fn in fns.items():
                times[k].append(do_bench(fn, warmup=10, rep=40, return_mode="median"))
        # bytes every version must move: dY, W, x read, dx written
        bound = (M * N + N * K + 2 * M * K) * 2 / 4.3e12 * 1e3
        print(f"== {args.norm} {shape}: memory bound {bound:.4f} ms (4.3 TB/s)")
        for k, fn in fns.items():
            err = f"   dx err {errors[k]:.1e}" if k in errors else ""
            print(f"  {k:40s} GPU {statistics.median(times[k]):.4f} ms   host {host_ms(fn):.4f} ms/call{err}")


if __name__ == "__main__":
    main()
