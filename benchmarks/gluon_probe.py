"""The Gluon mainloop (kernels/norm_gemm_gluon.py) on the GPU: every prologue and config against float64, then
timed side by side with cuBLAS, Inductor's norm and the Triton mainloop's best config. --ws adds the
warp-specialized kernel's configs (glu.WS_CONFIGS, not offered to the selection until checked here) to both.
--w-kn also checks every config with the weight stored [K, N] (W_KN, GPT-2's Conv1D: out = x @ w), which
glu.unsupported_reason keeps from the selection until checked here: the plans are forced (plan=..., w_kn=True).

    python benchmarks/gluon_probe.py [--ws] [--w-kn] [--json F]
"""
import argparse
import itertools
import json
import sys

import torch
import torch.nn.functional as F

from norm_fusion_inductor.kernels import norm_gemm as tri
from norm_fusion_inductor.kernels import norm_gemm_gluon as glu

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.kernel_probe import bench  # noqa: E402
from tests.helpers import ln_linear_reference64, rel_err, rms_linear_reference64  # noqa: E402

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
        cnorm = torch.compile(lambda x, g: F.rms_norm(x, (K,), g, EPS))
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--ws", action="store_true", help="also the warp-specialized kernel's configs (glu.WS_CONFIGS)")
    ap.add_argument("--w-kn", action="store_true", help="also check the configs with the weight stored [K, N]")
    args = ap.parse_args()
    configs = _configs(args.ws)
    print(torch.cuda.get_device_name(), torch.__version__)
    if not args.no_check:
        check(configs, args.w_kn)
    host_cost()
    if not args.no_timing:
        timing(args.json, configs)


if __name__ == "__main__":
    main()
