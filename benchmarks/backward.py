"""Norm → linear training step (forward + backward) on the GPU: torch.compile default (and max-autotune) of the
eager block against the fused ops, with the fused backward (the norm's backward on the dgrad GEMM,
NORM_FUSION_FUSED_BACKWARD=1) and without it; do_bench medians, interleaved; peak memory of each step.

    python benchmarks/backward.py --norm rms --shapes 65536x1024x1024 --json backward.json
    python benchmarks/backward.py --check-only --shapes 64x48x40      # CPU (interpreter): gradients only
    python benchmarks/backward.py --kernels --norm ln                  # the dgrad kernel alone (see below)

--kernels times the piece the fused backward replaces, alone: the dgrad GEMM dn = dY·W followed by the norm's
backward (dx, dγ, dβ from dn, x and the saved statistics), as torch.compile runs it (cuBLAS + one Inductor
reduction kernel) against `norm_gemm.norm_backward_dgrad` (one kernel, tuned plan). It says whether wiring the
kernel into compiled training graphs can pay before that wiring is written:
hidden % = (t_dgrad_mm + t_norm_bwd − t_fused) / t_norm_bwd.

hidden % = (t_norm + t_mm − t_fused) / t_norm, where t_norm is torch.compile of the norm alone, forward and
backward, and t_mm the three cuBLAS GEMMs of the linear's forward and backward (out, dx̂, dW).
A step is `out = block(x); dx, dγ, dW = autograd.grad(out, ..., dy)`.

The fused ops' backward serves eager calls; compiled training graphs still run Inductor's backward (issue 5).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SWEEP = [(65536, k, n) for k in (256, 1024, 2048) for n in (256, 1024, 2048)]
EPS = 1e-6


def rel_err(out, ref) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def make(M, K, N, dtype, device, norm):
    g = torch.Generator(device=device).manual_seed(M + K + N)
    x = torch.randn(M, K, device=device, generator=g).to(dtype).requires_grad_()
    gamma = (1 + 0.1 * torch.randn(K, device=device, generator=g)).to(dtype).requires_grad_()
    beta = (0.1 * torch.randn(K, device=device, generator=g)).to(dtype).requires_grad_() if norm == "ln" else None
    w = (torch.randn(N, K, device=device, generator=g) / K**0.5).to(dtype).requires_grad_()
    dy = torch.randn(M, N, device=device, generator=g).to(dtype)
    return x, gamma, beta, w, dy


def block(x, gamma, beta, w, norm):
    h = F.layer_norm(x, (x.shape[-1],), gamma, beta, EPS) if norm == "ln" else F.rms_norm(x, (x.shape[-1],), gamma, EPS)
    return F.linear(h, w)


def fused_block(x, gamma, beta, w, norm):
    if norm == "ln":
        return torch.ops.norm_fusion.layer_norm_linear(x, gamma, beta, w, None, EPS)[0]
    return torch.ops.norm_fusion.rms_norm_linear(x, gamma, w, None, EPS)[0]


def leaves64(params):
    """float64 copies of the operands as leaves of their own: differentiated through p.double(), the gradients
    come back rounded to p's bfloat16 (an error floor of 1.7e-3 in the reference)."""
    return [p.detach().double().requires_grad_() if p is not None else None for p in params]


def reference64(params, dy, norm):
    """The block's gradients in float64, the norm written out in elementwise ops and reductions. Not F.rms_norm /
    F.layer_norm: on the H200 (2026-11-30) the float64 reference through them disagreed with every variant,
    torch.compile's included, by ≈ 1.0 at RMS 65536×2048×256 and 65536×256×2048 (0.018 at LN 65536×2048×256),
    while the same code on the CPU agrees with this one to bfloat16 rounding; the err_torch64 column checks it."""
    x, gamma, beta, w = leaves64(params)
    if norm == "ln":
        var, mean = torch.var_mean(x, -1, correction=0, keepdim=True)
        h = (x - mean) * torch.rsqrt(var + EPS) * gamma + beta
    else:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * gamma
    return torch.autograd.grad(h @ w.t(), [p for p in (x, gamma, beta, w) if p is not None], dy.double())


def step(fn, params, dy):
    def run():
        return torch.autograd.grad(fn(*params), [p for p in params if p is not None], dy)
    return run


def fused_step(params, dy, norm, fused_backward: bool):
    def run():
        os.environ["NORM_FUSION_FUSED_BACKWARD"] = "1" if fused_backward else "0"
        return torch.autograd.grad(fused_block(*params, norm), [p for p in params if p is not None], dy)
    return run


def run_shape(M, K, N, args) -> dict:
    import norm_fusion_inductor  # noqa: F401  (registers the ops)

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype) if dev == "cuda" else torch.float32
    x, gamma, beta, w, dy = make(M, K, N, dtype, dev, args.norm)
    params = (x, gamma, beta, w)
    row = {"M": M, "K": K, "N": N, "norm": args.norm, "dtype": str(dtype)}
    ref = reference64(params, dy, args.norm)
    names = [n for n, p in zip(("x", "gamma", "beta", "w"), params) if p is not None]

    def errors(name, grads):  # the worst gradient, and each one (which gradient is off)
        errs = [rel_err(a, b) for a, b in zip(grads, ref)]
        row[f"err_{name}"] = max(errs)
        row[f"errs_{name}"] = dict(zip(names, errs))

    # torch's own float64 norm kernels against the written-out reference: ≈ 1.0 here means the old reference
    # (F.rms_norm / F.layer_norm in float64) was what went wrong on the GPU
    leaves = leaves64(params)
    errors("torch64", torch.autograd.grad(block(*leaves, args.norm), [p for p in leaves if p is not None],
                                          dy.double()))
    del leaves
    # pre-norm ops: gradients of (x, γ, β, W); poisoned nothing to poison: autograd.grad returns fresh tensors
    variants = {"fused_bwd": fused_step(params, dy, args.norm, True),
                "fused_fwd_only": fused_step(params, dy, args.norm, False)}
    for name, fn in variants.items():
        errors(name, fn())
    if args.check_only:
        return row
    from triton.testing import do_bench

    torch._dynamo.reset()
    default = torch.compile(lambda *p: block(*p, args.norm))
    norm_only = torch.compile(lambda x, g, b: (F.layer_norm(x, (K,), g, b, EPS) if args.norm == "ln"
                                                else F.rms_norm(x, (K,), g, EPS)))
    h = norm_only(x, gamma, beta).detach().requires_grad_()
    fns = {
        "default": step(lambda *p: default(*p), params, dy),
        "norm": lambda: torch.autograd.grad(norm_only(x, gamma, beta), [p for p in (x, gamma, beta) if p is not None],
                                            h.detach()),
        "mm": lambda: (torch.mm(h, w.t()), torch.mm(dy, w), torch.mm(dy.t(), h)),
        **variants,
    }
    if not args.no_max_autotune:
        mat = torch.compile(lambda *p: block(*p, args.norm), mode="max-autotune-no-cudagraphs")
        fns["max_autotune"] = step(lambda *p: mat(*p), params, dy)
    errors("default", fns["default"]())
    for fn in fns.values():  # compile and tune outside the timing
        fn()
    times = {k: [] for k in fns}
    peak = {}
    for _ in range(2):
        for name, fn in fns.items():
            times[name].append(do_bench(fn, warmup=10, rep=40, return_mode="median"))
    for name, fn in fns.items():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        peak[name] = (torch.cuda.max_memory_allocated() - base) / 2**20
    row.update({f"t_{k}": statistics.median(v) for k, v in times.items()})
    row["peak_mib"] = peak
    best = min(row["t_default"], row.get("t_max_autotune", float("inf")))
    for name in variants:
        row[f"hidden_{name}"] = (row["t_norm"] + row["t_mm"] - row[f"t_{name}"]) / row["t_norm"]
        row[f"ratio_{name}"] = row[f"t_{name}"] / best
    return row


def norm_backward_from_dn(dn, x, rstd, mean, gamma):
    """The norm's backward given dn = dL/d(normalized·γ + β) as Inductor's backward graph computes it: fp32 math,
    dx in x's dtype, dγ and dβ column sums (dβ None for RMSNorm). rstd, mean: [M, 1] fp32."""
    dn32, x32 = dn.float(), x.float()
    x_hat = (x32 - mean) * rstd if mean is not None else x32 * rstd
    g = dn32 * gamma.float() if gamma is not None else dn32
    proj = (g * x_hat).mean(-1, keepdim=True)
    centered = g - g.mean(-1, keepdim=True) if mean is not None else g
    dx = (rstd * (centered - x_hat * proj)).to(x.dtype)
    return dx, (dn32 * x_hat).sum(0), dn32.sum(0) if mean is not None else None


def kernel_row(M, K, N, args) -> dict:
    """The dgrad + norm-backward piece alone: torch.compile (cuBLAS mm + Inductor's reduction) against the
    fused kernel; every output against float64 first (outputs of the fused kernel are fresh: nothing to poison)."""
    from triton.testing import do_bench

    from norm_fusion_inductor.kernels import norm_gemm

    ln = args.norm == "ln"
    x, gamma, beta, w, dy = make(M, K, N, getattr(torch, args.dtype), "cuda", args.norm)
    x, gamma, w = x.detach(), gamma.detach(), w.detach()
    x32 = x.float()
    var, mu = torch.var_mean(x32, -1, correction=0, keepdim=True)
    mean = mu if ln else None
    rstd = torch.rsqrt((var if ln else x32.pow(2).mean(-1, keepdim=True)) + EPS)
    ref = norm_backward_from_dn(dy.double() @ w.double(), x.double(), rstd.double(),
                                mean.double() if ln else None, gamma.double())

    def piece(dy, w, x, rstd, mean, gamma):
        return norm_backward_from_dn(dy @ w, x, rstd, mean, gamma)

    torch._dynamo.reset()
    default = torch.compile(piece)
    norm_only = torch.compile(norm_backward_from_dn)
    dn = dy @ w
    rstd1, mean1 = rstd.reshape(-1).contiguous(), (mu.reshape(-1).contiguous() if ln else None)
    fns = {"default": lambda: default(dy, w, x, rstd, mean, gamma),
           "dgrad_mm": lambda: torch.mm(dy, w),
           "norm_bwd": lambda: norm_only(dn, x, rstd, mean, gamma),
           "fused": lambda: norm_gemm.norm_backward_dgrad(dy, w, x, rstd1, mean1, gamma, layer_norm=ln)}
    if not args.no_max_autotune:
        mat = torch.compile(piece, mode="max-autotune-no-cudagraphs")
        fns["max_autotune"] = lambda: mat(dy, w, x, rstd, mean, gamma)
    row = {"M": M, "K": K, "N": N, "norm": args.norm, "dtype": args.dtype}
    for name in ("default", "fused"):
        out = fns[name]()
        row[f"err_{name}"] = {g: rel_err(a, b) for g, a, b in zip(("dx", "dgamma", "dbeta"), out, ref)
                              if b is not None}
    times = {k: [] for k in fns}
    for _ in range(3):  # interleaved rounds
        for name, fn in fns.items():
            times[name].append(do_bench(fn, warmup=10, rep=40, return_mode="median"))
    row.update({f"t_{k}": statistics.median(v) for k, v in times.items()})
    best = min(row["t_default"], row.get("t_max_autotune", float("inf")))
    row["ratio_fused"] = row["t_fused"] / best
    row["hidden_fused"] = (row["t_dgrad_mm"] + row["t_norm_bwd"] - row["t_fused"]) / row["t_norm_bwd"]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="*", help="MxKxN ...")
    p.add_argument("--norm", choices=["rms", "ln"], default="rms")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--no-max-autotune", action="store_true")
    p.add_argument("--check-only", action="store_true", help="gradients against float64 only (CPU: interpreter)")
    p.add_argument("--kernels", action="store_true", help="the dgrad + norm-backward piece alone (GPU)")
    p.add_argument("--json")
    args = p.parse_args()
    if args.kernels and not torch.cuda.is_available():
        p.error("--kernels times GPU kernels: no CUDA device")
    if not torch.cuda.is_available():
        args.check_only = True
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ["NORM_FUSION_INTERPRET"] = "1"
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else SWEEP
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (interpreter)"
    print(f"# {device}  torch {torch.__version__}  python {platform.python_version()}  "
          f"{time.strftime('%Y-%m-%d %H:%M')}  norm={args.norm}", flush=True)
    rows = []
    for M, K, N in shapes:
        row = kernel_row(M, K, N, args) if args.kernels else run_shape(M, K, N, args)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items()}, default=str), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
