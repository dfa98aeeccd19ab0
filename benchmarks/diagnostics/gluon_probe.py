"""The Gluon mainloop (kernels/norm_gemm_gluon.py) on the GPU: every prologue and config against float64, then
timed side by side with cuBLAS, Inductor's norm and the Triton mainloop's best config. --ws adds the
warp-specialized kernel's configs (glu.WS_CONFIGS, not offered to the selection until checked here) to both.
--w-kn also checks every config with the weight stored [K, N] (W_KN, GPT-2's Conv1D: out = x @ w), which
glu.unsupported_reason keeps from the selection until checked here: the plans are forced (plan=..., w_kn=True).
--post checks and times the post-norm "row" epilogue instead (tri.matmul_norm with a "gluon_row" plan,
y = norm(x wᵀ + b + residual),
not offered to the selection until checked here): every config holding whole rows (BLOCK_N ≥ N) against float64
beside the Triton row plan and the unfused path, then timed against cuBLAS + Inductor's norm and the Triton row
plan at N = 256.

    python benchmarks/diagnostics/gluon_probe.py [--ws] [--w-kn] [--post] [--json F]
    python benchmarks/diagnostics/gluon_probe.py --ws --ln [MxKxN ...]   # LayerNorm vs RMSNorm, kernel vs weight preparation
    python benchmarks/diagnostics/gluon_probe.py --stats-own-block [--ln ...]  # the checks with STATS_OWN_BLOCK on, and its A/B
"""
import argparse
import itertools
import json
import sys

import torch
import torch.nn.functional as F

from norm_fusion_inductor.kernels import norm_gemm as tri
from norm_fusion_inductor.kernels import norm_gemm_gluon as glu
from norm_fusion_inductor.kernels import tuning

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.diagnostics.kernel_probe import bench  # noqa: E402
from tests.helpers import (linear_post_norm_reference64, linear_post_norm_unfused, ln_linear_reference64,  # noqa: E402
                           rel_err, rms_linear_reference64)

EPS = 1e-6
CHECK_SHAPES = [(1000, 768, 776), (4096, 1024, 768), (333, 256, 2048)]
TIME_SHAPES = [(65536, 1024, 1024), (65536, 2048, 1024), (262144, 1024, 256), (262144, 256, 1024),
               (16384, 4096, 4096), (65536, 2048, 256)]


def _configs(ws):
    """(label, cfg) of the configs to check and time: the production ones ("0", "1", ...: cfg0 / gluon0_* as
    before), and with ``ws`` the warp-specialized ones ("ws0", ...)."""
    return ([(str(i), c) for i, c in enumerate(glu.CONFIGS)]
            + [(f"ws{i}", c) for i, c in enumerate(glu.WS_CONFIGS) if ws])


def check(configs, w_kn_too=False):
    """Every config and prologue against float64, with the weight stored [N, K] and, with ``w_kn_too``, also
    stored [K, N] (the same weight transposed: the same reference)."""
    layouts = (False, True) if w_kn_too else (False, )
    worst = 0.0
    for M, K, N in CHECK_SHAPES:
        for layer_norm in (False, True):
            for shift in ((0.0, 1000.0) if layer_norm else (0.0,)):
                torch.manual_seed(M + K + N)
                x = (torch.randn(M, K, device="cuda") + shift).bfloat16()
                g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
                b = (0.1 * torch.randn(K, device="cuda")).bfloat16()
                w = (torch.randn(N, K, device="cuda") / K**0.5).bfloat16()
                bias = torch.randn(N, device="cuda").bfloat16()
                if layer_norm:
                    ref, ref_mean, ref_rstd = ln_linear_reference64(x, g, b, w, bias, EPS)
                else:
                    (ref, ref_rstd), ref_mean = rms_linear_reference64(x, g, w, bias, EPS), None
                if layer_norm:
                    unfused = F.linear(F.layer_norm(x, (K,), g, b, EPS), w, bias)
                else:
                    unfused = F.linear(F.rms_norm(x, (K,), g, EPS), w, bias)
                for (label, cfg), w_kn in itertools.product(configs, layouts):
                    w_arg = w.t().contiguous() if w_kn else w
                    for prologue in ("in_loop", "pre_pass"):
                        # asked without w_kn: it rejects W_KN for the selection, which is what is checked here
                        if glu.unsupported_reason(x.dtype, x.device, K, cfg, prologue, layer_norm):
                            continue
                        plan = ("gluon_" + prologue, cfg)
                        if layer_norm:
                            out, mean, rstd = tri.layer_norm_matmul(x, g, b, w_arg, bias, EPS, plan=plan, w_kn=w_kn)
                        else:
                            (out, rstd), mean = tri.rms_norm_matmul(x, g, w_arg, bias, EPS, plan=plan, w_kn=w_kn), None
                        err = rel_err(out, ref)
                        worst = max(worst, err / max(rel_err(unfused, ref), 1e-3))
                        print(f"check {'ln' if layer_norm else 'rms'} shift {shift:g} {M}x{K}x{N} cfg{label}"
                              f"{' w_kn' if w_kn else ''} {prologue}: "
                              f"out {err:.2e} (unfused {rel_err(unfused, ref):.2e}) "
                              f"rstd {rel_err(rstd, ref_rstd.flatten()):.1e}"
                              + (f" mean {rel_err(mean, ref_mean.flatten()):.1e}" if layer_norm else ""), flush=True)
        # the plain GEMM
        x = torch.randn(M, K, device="cuda").bfloat16()
        w = (torch.randn(N, K, device="cuda") / K**0.5).bfloat16()
        for (label, cfg), w_kn in itertools.product(configs, layouts):
            out, _ = tri.rms_norm_matmul(x, None, w.t().contiguous() if w_kn else w, None, EPS,
                                         plan=("gluon_plain", cfg), w_kn=w_kn)
            print(f"check plain {M}x{K}x{N} cfg{label}{' w_kn' if w_kn else ''}: "
                  f"{rel_err(out, x.double() @ w.double().t()):.2e}", flush=True)
    print(f"check worst error / unfused error: {worst:.2f}")


def timing(json_path, configs):
    rows = []
    tri_cfg = tri._GPU_CONFIGS[0]
    for M, K, N in TIME_SHAPES:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
        w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
        normed = F.rms_norm(x, (K,), g, EPS)
        # static and compiled anew per shape: recompiled for each new shape, the same lambda read 2-7x the norm's
        # bandwidth time at every shape after the first (gluon_probe.py, H200, 2026-11-30); its hidden % was wrong
        torch._dynamo.reset()
        cnorm = torch.compile(lambda x, g: F.rms_norm(x, (K,), g, EPS), dynamic=False)
        cnorm(x, g)
        fns = {"cublas": lambda: torch.mm(normed, w.t()), "inductor_norm": lambda: cnorm(x, g)}
        for p in ("plain", "in_loop", "pre_pass"):
            fns[f"triton_{p}"] = lambda p=p: tri.rms_norm_matmul(x, g, w, None, EPS, plan=(p, tri_cfg))
        for label, cfg in configs:
            if glu.unsupported_reason(x.dtype, x.device, K, cfg, "in_loop", False):
                continue
            for p in ("plain", "in_loop", "pre_pass"):
                fns[f"gluon{label}_{p}"] = lambda p=p, cfg=cfg: tri.rms_norm_matmul(x, g, w, None, EPS,
                                                                                     plan=("gluon_" + p, cfg))
        t = bench(fns, rounds=3, rep=40)
        unfused = t["cublas"] + t["inductor_norm"]
        best = min((v, k) for k, v in t.items() if k.endswith("in_loop") or k.endswith("pre_pass"))
        print(f"\n{M}x{K}x{N}: cuBLAS {t['cublas']:.4f} norm {t['inductor_norm']:.4f} unfused {unfused:.4f} "
              f"| best fused {best[1]} {best[0]:.4f} hidden {100 * (unfused - best[0]) / t['inductor_norm']:.0f}%")
        for k, v in t.items():
            if k not in ("cublas", "inductor_norm"):
                print(f"  {k:18s} {v:.4f}  ({v / t['cublas']:.3f}x cuBLAS)")
        rows.append(dict(shape=[M, K, N], times=t))
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(dict(gluon_configs=[cfg for _, cfg in configs], triton_config=tri_cfg, rows=rows), fh, indent=1)


def _own_block(fn):
    """fn with the in-loop row sums in a basic block of their own (tuning.gluon_stats_own_block, for the A/B)."""
    def run():
        with tuning.override(gluon_stats_own_block=True):
            return fn()
    return run


def timing_ln(json_path, configs, shapes, own_block=False):
    """LayerNorm against RMSNorm on the Gluon mainloop, per config: the eager entry points (which prepare the
    weight every call: W·γ, and for LayerNorm also v = Wβ + b and u = Σ_k W·γ) and the launches alone with the
    weight prepared once, so that the kernel's cost and the preparation's are told apart."""
    rows = []
    for M, K, N in shapes:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
        b = (0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
        w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
        bias = torch.randn(N, device="cuda").to(torch.bfloat16)
        normed = F.layer_norm(x, (K,), g, b, EPS)
        w_eff = tri._fold(w, g)
        u = w_eff.sum(1, dtype=torch.float32)
        v = tri._fold_bias(w, b, bias)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        rstd = torch.empty(M, device="cuda", dtype=torch.float32)
        mean = torch.empty(M, device="cuda", dtype=torch.float32)
        fns = {"cublas": lambda: F.linear(normed, w, bias),
               "prepare_rms": lambda: tri._fold(w, g),
               "prepare_ln": lambda: (tri._fold_bias(w, b, bias), tri._fold(w, g).sum(1, dtype=torch.float32)),
               "row_stats_ln": lambda: tri.row_stats(x, rstd, mean, EPS)}
        for label, cfg in configs:
            if glu.unsupported_reason(x.dtype, x.device, K, cfg, "in_loop", True):
                continue
            fns[f"rms{label}_in_loop"] = lambda cfg=cfg: tri.rms_norm_matmul(x, g, w, bias, EPS,
                                                                            plan=("gluon_in_loop", cfg))
            fns[f"ln{label}_in_loop"] = lambda cfg=cfg: tri.layer_norm_matmul(x, g, b, w, bias, EPS,
                                                                             plan=("gluon_in_loop", cfg))
            fns[f"rms{label}_kernel"] = lambda cfg=cfg: glu.launch(
                x, w_eff, out, cfg, row_stats=glu.RMS_STATS, bias=bias, rstd=rstd, eps=EPS, write_stats=True)
            fns[f"ln{label}_kernel"] = lambda cfg=cfg: glu.launch(
                x, w_eff, out, cfg, row_stats=glu.LN_STATS, bias=v, rstd=rstd, mean=mean, u=u, eps=EPS,
                write_stats=True)
            fns[f"ln{label}_pre_pass_kernel"] = lambda cfg=cfg: glu.launch(
                x, w_eff, out, cfg, row_scale=True, bias=v, rstd=rstd, mean=mean, u=u, eps=EPS)
            fns[f"plain{label}_kernel"] = lambda cfg=cfg: glu.launch(x, w_eff, out, cfg, bias=bias)
            if own_block:  # the same launches with the row sums in their own basic block
                for name in (f"rms{label}_kernel", f"ln{label}_kernel"):
                    fns[name + "_own_block"] = _own_block(fns[name])
        t = bench(fns, rounds=3, rep=40)
        print(f"\nln {M}x{K}x{N}: cuBLAS (linear with bias) {t['cublas']:.4f}")
        for k, val in t.items():
            print(f"  {k:22s} {val:.4f}  ({val / t['cublas']:.3f}x cuBLAS)")
        rows.append(dict(shape=[M, K, N], times=t))
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(dict(ln=True, gluon_configs=[cfg for _, cfg in configs], rows=rows), fh, indent=1)


def host_cost():
    """Host time per call (µs) of the eager entry point with a Triton and a Gluon plan, at a shape whose GPU time
    is tiny: the Gluon plans run through the custom op (no direct launch), so this is what they add per call."""
    import time

    x = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
    g = torch.ones(1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    for name, plan in (("triton in_loop", ("in_loop", tri._GPU_CONFIGS[0])),
                       ("gluon in_loop", ("gluon_in_loop", glu.CONFIGS[0]))):
        for _ in range(20):
            tri.rms_norm_matmul(x, g, w, None, EPS, plan=plan)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(200):
            tri.rms_norm_matmul(x, g, w, None, EPS, plan=plan)
        host = (time.perf_counter() - start) / 200 * 1e6
        torch.cuda.synchronize()
        print(f"host {name}: {host:.1f} us per call")


POST_CHECK_SHAPES = [(1000, 768, 256), (4096, 512, 200), (333, 1024, 256)]
POST_TIME_SHAPES = [(m, k, 256) for m in (65536, 262144) for k in (256, 512, 1024, 2048)]
# (name, layer_norm, residual shift, every operand on): "bare" leaves out bias, γ, β, both residuals and z
POST_CASES = [("rms", False, 0.0, True), ("ln", True, 0.0, True), ("ln shift 1000", True, 1000.0, True),
              ("rms bare", False, 0.0, False), ("ln bare", True, 0.0, False)]


def _post_operands(M, K, N, shift, full):
    torch.manual_seed(M + K + N)
    x = torch.randn(M, K, device="cuda").bfloat16()
    w = (torch.randn(N, K, device="cuda") / K**0.5).bfloat16()
    if not full:
        return x, w, None, None, None, None, None
    bias = (0.1 * torch.randn(N, device="cuda")).bfloat16()
    residual = (torch.randn(M, N, device="cuda") + shift).bfloat16()  # shift: |mean| ≫ std for LayerNorm
    gamma = (1 + 0.1 * torch.randn(N, device="cuda")).bfloat16()
    beta = (0.1 * torch.randn(N, device="cuda")).bfloat16()
    residual_out = torch.randn(M, N, device="cuda").bfloat16()
    return x, w, bias, residual, gamma, beta, residual_out


def _post_configs(configs, dtype, M, K, N):
    return [(label, cfg) for label, cfg in configs
            if not glu.post_unsupported_reason(dtype, torch.device("cuda"), M, K, N, cfg)]


def _triton_row_plans(x, N):
    return [plan for plan in tri._post_candidate_plans(x, N) if plan[0] == "row"]


def check_post(configs):
    """Every config with BLOCK_N ≥ N against float64: y, z (written whenever the case has a residual), mean, rstd;
    beside the error of the Triton row plan and of the unfused path (F.linear + residual rounded to bf16, the
    norm in fp32). The bare cases (only the first shape, to keep the compiles few) have no optional operand."""
    worst = 0.0
    for i, (M, K, N) in enumerate(POST_CHECK_SHAPES):
        for name, layer_norm, shift, full in POST_CASES:
            if not full and i:
                continue
            x, w, bias, residual, gamma, beta, residual_out = _post_operands(M, K, N, shift, full)
            beta = beta if layer_norm else None
            ref, ref_z, ref_mean, ref_rstd = linear_post_norm_reference64(x, w, bias, residual, gamma, beta, EPS,
                                                                          layer_norm, residual_out)
            unfused = linear_post_norm_unfused(x, w, bias, residual, gamma, beta, EPS, layer_norm)
            if residual_out is not None:
                unfused = unfused + residual_out.float()
            unfused_err = rel_err(unfused, ref)
            kwargs = dict(layer_norm=layer_norm, write_z=full, residual_out=residual_out)
            runs = [("triton_" + plan[0], lambda plan=plan: tri.matmul_norm(x, w, bias, residual, gamma, beta, EPS,
                                                                             plan=plan, **kwargs))
                    for plan in _triton_row_plans(x, N)[:1]]
            runs += [(f"gluon{label}", lambda cfg=cfg: tri.matmul_norm(x, w, bias, residual, gamma, beta, EPS,
                                                                        plan=("gluon_row", cfg), **kwargs))
                     for label, cfg in _post_configs(configs, x.dtype, M, K, N)]
            for label, run in runs:
                y, z, mean, rstd = run()
                err = rel_err(y, ref)
                if label.startswith("gluon"):
                    worst = max(worst, err / max(unfused_err, 1e-3))
                print(f"check post {name} {M}x{K}x{N} {label}: y {err:.2e} (unfused {unfused_err:.2e}) "
                      f"rstd {rel_err(rstd, ref_rstd.flatten()):.1e}"
                      + (f" mean {rel_err(mean, ref_mean.flatten()):.1e}" if layer_norm else "")
                      + (f" z {rel_err(z, ref_z):.1e}" if z is not None else ""), flush=True)
    print(f"check post worst gluon error / unfused error: {worst:.2f}")


def timing_post(json_path, configs):
    """z = x wᵀ + b + residual, y = norm(z)·γ (+ β), z not written: cuBLAS (addmm) + Inductor's residual-add +
    norm kernel (compiled once per M and norm: its input z is [M, N] whatever K) against the Triton row plans and
    the Gluon configs."""
    rows = []
    compiled = {}
    for (M, K, N), layer_norm in itertools.product(POST_TIME_SHAPES, (False, True)):
        x, w, bias, residual, gamma, beta, _ = _post_operands(M, K, N, 0.0, True)
        beta = beta if layer_norm else None
        if (M, layer_norm) not in compiled:
            def norm(z, residual, gamma, beta, layer_norm=layer_norm):
                z = z + residual
                if layer_norm:
                    return F.layer_norm(z, (N,), gamma, beta, EPS)
                return F.rms_norm(z, (N,), gamma, EPS)
            compiled[M, layer_norm] = torch.compile(norm, dynamic=False)
        cnorm = compiled[M, layer_norm]
        z = F.linear(x, w, bias)
        cnorm(z, residual, gamma, beta)
        fns = {"cublas": lambda: F.linear(x, w, bias), "inductor_norm": lambda: cnorm(z, residual, gamma, beta)}
        for i, plan in enumerate(_triton_row_plans(x, N)):
            fns[f"triton_row{i}"] = lambda plan=plan: tri.matmul_norm(x, w, bias, residual, gamma, beta, EPS,
                                                                      layer_norm=layer_norm, plan=plan)
        for label, cfg in _post_configs(configs, x.dtype, M, K, N):
            fns[f"gluon{label}"] = lambda cfg=cfg: tri.matmul_norm(x, w, bias, residual, gamma, beta, EPS,
                                                                   layer_norm=layer_norm, plan=("gluon_row", cfg))
        t = bench(fns, rounds=3, rep=40)
        unfused = t["cublas"] + t["inductor_norm"]
        best = min((v, k) for k, v in t.items() if k not in ("cublas", "inductor_norm"))
        print(f"\npost {'ln' if layer_norm else 'rms'} {M}x{K}x{N}: cuBLAS {t['cublas']:.4f} "
              f"norm {t['inductor_norm']:.4f} unfused {unfused:.4f} | best fused {best[1]} {best[0]:.4f} "
              f"({unfused / best[0]:.2f}x unfused)")
        for k, v in t.items():
            if k not in ("cublas", "inductor_norm"):
                print(f"  {k:18s} {v:.4f}  ({v / unfused:.3f}x unfused, {v / t['cublas']:.3f}x cuBLAS)")
        rows.append(dict(shape=[M, K, N], layer_norm=layer_norm, times=t))
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(dict(post=True, gluon_configs=[cfg for _, cfg in configs], rows=rows), fh, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--ws", action="store_true", help="also the warp-specialized kernel's configs (glu.WS_CONFIGS)")
    ap.add_argument("--w-kn", action="store_true", help="also check the configs with the weight stored [K, N]")
    ap.add_argument("--post", action="store_true", help="the post-norm epilogue (\"gluon_row\" plans) instead")
    ap.add_argument("--stats-own-block", action="store_true",
                    help="check with tuning.gluon_stats_own_block on; with --ln also time the kernels with it")
    ap.add_argument("--ln", nargs="*", metavar="MxKxN",
                    help="time LayerNorm against RMSNorm per config, kernel and weight preparation apart (timing_ln)")
    args = ap.parse_args()
    configs = _configs(args.ws)
    print(torch.cuda.get_device_name(), torch.__version__)
    if args.ln is not None:
        timing_ln(args.json, configs, [tuple(int(v) for v in s.split("x")) for s in args.ln] or TIME_SHAPES,
                  args.stats_own_block)
        return
    if args.stats_own_block:  # the float64 checks below with it on
        tuning.adopt(gluon_stats_own_block=True)
    if args.post:
        if not args.no_check:
            check_post(configs)
        if not args.no_timing:
            timing_post(args.json, configs)
        return
    if not args.no_check:
        check(configs, args.w_kn)
    host_cost()
    if not args.no_timing:
        timing(args.json, configs)


if __name__ == "__main__":
    main()
