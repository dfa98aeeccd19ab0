"""Where the host time of a fused pre-norm site goes (µs per call, calls queued without waiting for the GPU):
the kernel's own launch, the thin op around the Gluon launch, the eager entry, and the compiled graph with each
mainloop, against torch.compile default; then a cProfile of the compiled Gluon site.

    python benchmarks/diagnostics/host_profile.py [MxKxN] [--norm ln]
"""
import cProfile
import os
import pstats
import sys

import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from blocks import host_ms  # noqa: E402

import norm_fusion_inductor as nfi
from norm_fusion_inductor import selection
from norm_fusion_inductor.kernels import norm_gemm as tri
from norm_fusion_inductor.kernels import norm_gemm_gluon as glu

EPS = 1e-5


def main():
    shape = next((a for a in sys.argv[1:] if "x" in a and not a.startswith("-")), "65536x512x256")
    M, K, N = (int(v) for v in shape.split("x"))
    ln = "--norm" in sys.argv and sys.argv[sys.argv.index("--norm") + 1] == "ln"
    dt = torch.bfloat16
    x = torch.randn(M, K, device="cuda", dtype=dt)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).to(dt)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(dt)
    out = torch.empty(M, N, device="cuda", dtype=dt)
    rstd = torch.empty(M, device="cuda", dtype=torch.float32)
    mean = torch.empty(M, device="cuda", dtype=torch.float32) if ln else None
    u = w.float().sum(1) if ln else None
    cfg = glu.CONFIGS[0]
    args = (x, w, out, None, rstd, mean, u, EPS, glu.LN_STATS if ln else glu.RMS_STATS, False, True,
            cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["NUM_BUFFERS"], cfg["GROUP_M"], cfg["num_warps"])

    def model(x, g, w):
        h = F.layer_norm(x, (K,), g, 0.5 * g, EPS) if ln else F.rms_norm(x, (K,), g, EPS)
        return F.linear(h, w)

    def entry(plan):
        if ln:
            return lambda: tri.layer_norm_matmul(x, g, 0.5 * g, w, None, EPS, plan=plan)
        return lambda: tri.rms_norm_matmul(x, g, w, None, EPS, plan=plan)

    rows = {
        "gluon launch (cached launcher)": lambda: glu._launch_kernel(*args),
        "gluon thin op (op + cached launcher)": lambda: torch.ops.norm_fusion.gluon_norm_gemm(*args),
        "eager entry, gluon_in_loop": entry(("gluon_in_loop", cfg)),
        "eager entry, triton in_loop": entry(("in_loop", tri._GPU_CONFIGS[0])),
    }
    compiled = {"torch.compile default": torch.compile(model)}
    for mainloop, prologues in (("gluon", tri.ALL_PROLOGUES), ("triton", tri.PROLOGUES)):
        # the site forced fused, with the best plan of one mainloop only
        torch._dynamo.reset()
        selection._MEMORY.clear()  # each mainloop tunes its own plan
        orig = selection._tune
        selection._tune = lambda site, inputs=None, prologues=prologues, _orig=orig: _orig(site, inputs, prologues)
        try:
            c = torch.compile(lambda x, g, w: model(x, g, w), backend="norm_fusion",
                              options={"norm_fusion": {"policy": "always", "fusions": nfi.FUSIONS,
                                                       "cache_dir": f"/tmp/nf_cache_{mainloop}"}})
            c(x, g, w)
        finally:
            selection._tune = orig
        print(mainloop, "site:", [(s.rewritten, s.reason[-60:]) for s in nfi.reports()][-1:])
        compiled[f"compiled plugin, {mainloop} plan"] = c
    for name, c in compiled.items():
        c(x, g, w)
        rows[name] = (lambda c: lambda: c(x, g, w))(c)
    from triton.testing import do_bench
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} shape {M}x{K}x{N} {'ln' if ln else 'rms'}")
    for name, fn in rows.items():
        gpu = do_bench(fn, warmup=10, rep=50, return_mode="median") * 1e3
        print(f"{name:40s} host {host_ms(fn, 200) * 1e3:7.1f} us/call   do_bench {gpu:7.1f} us")
    prof = cProfile.Profile()
    fn = rows["compiled plugin, gluon plan"]
    prof.enable()
    for _ in range(200):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(22)


if __name__ == "__main__":
    main()
