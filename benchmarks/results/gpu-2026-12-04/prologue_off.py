"""Issue 24 item 5's evidence: norm → linear pairs and the plugin with and without the older in-loop prologue
families (rms_norm_matmul, layer_norm_matmul), policy auto, each with its own cold selection cache; torch.compile
default beside them, every variant timed interleaved (do_bench medians, 3 rounds). Prints per shape: ms, × default,
the first compile's seconds and which family took the site.
    python prologue_off.py [--norm rms|ln] [--shapes MxKxN ...]      (GPU)"""
import argparse
import tempfile
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import norm_fusion_inductor as nfi
from norm_fusion_inductor.timing import interleaved_medians

SHAPES = ["65536x256x256", "65536x512x1024", "65536x1024x1024", "65536x2048x2048", "262144x256x256",
          "262144x256x1024", "262144x1024x512", "262144x2048x256", "16384x4096x4096", "8192x4096x28672"]
WITHOUT = tuple(f for f in nfi.FUSIONS if f not in ("rms_norm_matmul", "layer_norm_matmul"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--norm", default="rms", choices=["rms", "ln"])
    p.add_argument("--shapes", nargs="*", default=SHAPES)
    args = p.parse_args()

    def model(x, g, w):
        h = (F.layer_norm(x, x.shape[-1:], g, 0.5 * g, 1e-6) if args.norm == "ln"
             else F.rms_norm(x, x.shape[-1:], g, 1e-6))
        return F.linear(h, w)

    print(f"{args.norm}: shape | default ms | with prologues ms (x) | without ms (x) | compile s default / with / "
          f"without | with: taken by | without: taken by", flush=True)
    for shape in args.shapes:
        M, K, N = map(int, shape.split("x"))
        torch._dynamo.reset()
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
        w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
        ref = model(x.double(), g.double(), w.double())
        fns, compile_s, taken = {}, {}, {}
        for name, fusions in (("default", None), ("without", WITHOUT), ("with", nfi.FUSIONS)):
            nfi.clear_reports()
            opts = {} if fusions is None else dict(backend="norm_fusion", options={"norm_fusion": {
                "fusions": fusions, "cache_dir": tempfile.mkdtemp()}})
            c = torch.compile((lambda *a: model(*a)), **opts)
            t0 = time.perf_counter()
            out = c(x, g, w)
            torch.cuda.synchronize()
            compile_s[name] = time.perf_counter() - t0
            err = ((out.double() - ref).norm() / ref.norm()).item()
            assert err < 2e-2, (shape, name, err)
            taken[name] = "; ".join(f"{s.fusion if s.rewritten else 'unfused'}" for s in nfi.reports()) or "-"
            fns[name] = (lambda c: lambda: c(x, g, w))(c)
        t = interleaved_medians(fns, 3, lambda fn: do_bench(fn, warmup=10, rep=40, return_mode="median"))
        d = t["default"]
        print(f"{shape} | {d:.4f} | {t['with']:.4f} ({d / t['with']:.3f}) | {t['without']:.4f} "
              f"({d / t['without']:.3f}) | {compile_s['default']:.1f} / {compile_s['with']:.1f} / "
              f"{compile_s['without']:.1f} | {taken['with']} | {taken['without']}", flush=True)


if __name__ == "__main__":
    main()
