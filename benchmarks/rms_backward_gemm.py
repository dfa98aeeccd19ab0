"""RMSNorm's backward on its consumer's dgrad (``norm_fusion::rms_backward_gemm``, variant C of
docs/design_notes/regrouped_backward.md) against what a training graph runs today: the dgrad on cuBLAS, then the
norm's backward as Inductor fuses it (torch.compile default and max-autotune of the same function). Side by side
in one process (do_bench medians, interleaved), bf16 on the GPU, with each result's error against float64.

    python benchmarks/rms_backward_gemm.py [--only 262144x1024x256 ...] [--json out.json]

`fused`: the op given c̄ = Σ_j dz_j·(z_j − b_j)/N (precomputed here, not timed: in a training graph it is a row
sum over the tensors the activation's backward already reads and writes, which Inductor can fuse there; where no
such kernel exists, e.g. q/k/v, it would cost a pass over dz and z), on the usual 128-row tiles at any width.

Shapes are M×F×N: dz [M, F] (the consumer's output gradient), W [F, N] (nn.Linear's weight), x, dR, dx [M, N].
Speed-of-light: max(2MFN / 790 TFLOP/s, bytes / 4.3 TB/s), bytes = dz + W + x + dR + dx once each (blocks.py's
H200 rates).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys

import torch

from norm_fusion_inductor import regrouped
from norm_fusion_inductor.kernels import epilogue_gemm as eg
from norm_fusion_inductor.timing import interleaved_medians

SHAPES = [(262144, 1024, 256), (262144, 512, 128), (131072, 1024, 512), (16384, 14336, 4096)]


def unfused(dz, w, x, rstd, gamma, dres):
    """The dgrad, then the norm's backward in fp32 (what HF's RMSNorm differentiates to)."""
    dn = dz @ w
    x_hat = x.float() * rstd[:, None]
    g = dn.float() * gamma.float()
    dx = rstd[:, None] * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
    return (dx + dres.float()).to(x.dtype), (dn.float() * x_hat).sum(0)


def reference64(dz, w, x, rstd, gamma, dres):
    dn = dz.double() @ w.double()
    x_hat = x.double() * rstd.double()[:, None]
    g = dn * gamma.double()
    dx = rstd.double()[:, None] * (g - x_hat * (g * x_hat).mean(-1, keepdim=True)) + dres.double()
    return dx, (dn * x_hat).sum(0)


def rel(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", help="shapes as MxFxN (default: SHAPES)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    from triton.testing import do_bench

    import triton

    torch._dynamo.config.cache_size_limit = 64  # one compile per shape and mode, never the eager fallback
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.only] if args.only else SHAPES
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    rows = []
    for M, F, N in shapes:
        torch.manual_seed(0)
        dev, dt = "cuda", torch.bfloat16
        x = torch.randn(M, N, device=dev, dtype=dt) * 2 + 0.3
        gamma = (torch.rand(N, device=dev) + 0.5).to(dt)
        w = torch.randn(F, N, device=dev, dtype=dt) / N ** 0.5
        dz = torch.randn(M, F, device=dev, dtype=dt)
        dres = torch.randn(M, N, device=dev, dtype=dt)
        rstd = torch.rsqrt(x.float().square().mean(-1) + 1e-6)
        inputs = (dz, w, x, rstd, gamma, dres)
        z = ((x.float() * rstd[:, None] * gamma.float()) @ w.float().t()).to(dt)  # the consumer's saved output
        row_mean = (dz.float() * z.float()).sum(-1) / N
        del z
        fns = {
            "cublas_dgrad_only": lambda: torch.mm(dz, w),
            "default": torch.compile(unfused, dynamic=False),
            "max-autotune": torch.compile(unfused, dynamic=False, mode="max-autotune-no-cudagraphs"),
            "fused": lambda *a: regrouped.rms_backward_gemm(*a, True, row_mean),
        }
        calls = {n: functools.partial(f, *inputs) if n != "cublas_dgrad_only" else f for n, f in fns.items()}
        ref = reference64(*inputs)
        errors = {}
        for name, call in calls.items():  # compile and tune first; check every result
            out = call()
            if name != "cublas_dgrad_only":
                errors[name] = (rel(out[0], ref[0]), rel(out[1], ref[1]))
        t = interleaved_medians(calls, args.rounds, lambda f: do_bench(f, warmup=10, rep=50, return_mode="median"))
        nbytes = 2 * (M * F + F * N + 3 * M * N)
        sol = max(2 * M * F * N / 790e12, nbytes / 4.3e12) * 1e3
        best = min(t["default"], t["max-autotune"])
        print(f"\n{M}×{F}×{N}  (speed-of-light {sol:.4f} ms)")
        for name, ms in t.items():
            err = errors.get(name)
            err_s = f"  err dx {err[0]:.1e} dγ {err[1]:.1e}" if err else ""
            print(f"  {name:18s} {ms:.4f} ms  × SOL {ms / sol:.2f}  best-baseline/this {best / ms:.3f}{err_s}",
                  flush=True)
        rows.append(dict(shape=(M, F, N), sol_ms=sol, errors=errors, **t))
        if args.json:  # after every shape: a run cut by a time limit keeps what it finished
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        del inputs, calls, fns
        torch.cuda.empty_cache()
    print("\nchosen configs (M bucket, N, K, dtype, w_kn, epilogue) -> config:", eg.tuned_configs(), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
