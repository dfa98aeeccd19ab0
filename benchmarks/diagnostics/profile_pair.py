"""Where a norm → linear pair's time goes, fused against torch.compile default: per compiled variant the
do_bench median (host included), the CUDA-graph replay time (GPU only), their difference (the host's share), the
kernels per call with their device times (torch.profiler), and the selection's reason. Written for issue 27's
65536×256×256 RMSNorm pair, which the selection fused and which then ran 0.89× default.

    python benchmarks/diagnostics/profile_pair.py --shapes 65536x256x256 262144x256x256 [--norm rms|ln] [--params]
    python benchmarks/diagnostics/profile_pair.py --no-kernels --shapes ...     # a sweep: times and decisions

``--params``: γ and W are module parameters (the fold is then kept across calls in inference) instead of inputs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import norm_fusion_inductor as nfi
from norm_fusion_inductor.timing import graph_ms, interleaved_medians

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from blocks import kernel_times  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="*", default=["65536x256x256", "262144x256x256"])
    p.add_argument("--norm", choices=["rms", "ln"], default="rms")
    p.add_argument("--params", action="store_true")
    p.add_argument("--no-kernels", action="store_true", help="times alone, no per-kernel profile (a sweep)")
    args = p.parse_args()

    def pair(x, g, w):
        h = (F.layer_norm(x, x.shape[-1:], g, 0.5 * g, 1e-6) if args.norm == "ln"
             else F.rms_norm(x, x.shape[-1:], g, 1e-6))
        return F.linear(h, w)

    for shape in args.shapes:
        M, K, N = map(int, shape.split("x"))
        torch._dynamo.reset()
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        g = (1 + 0.1 * torch.randn(K, device="cuda")).bfloat16()
        w = (torch.randn(N, K, device="cuda") / K ** 0.5).bfloat16()
        ref = pair(x.double(), g.double(), w.double())
        fns = {}
        for name in ("default", "norm_fusion"):
            opts = {} if name == "default" else dict(backend="norm_fusion", options={"norm_fusion": {
                "cache_dir": tempfile.mkdtemp()}})
            nfi.clear_reports()
            if args.params:
                module = torch.nn.Module()
                module.g, module.w = torch.nn.Parameter(g, requires_grad=False), torch.nn.Parameter(w, requires_grad=False)
                compiled = torch.compile(lambda x, m=module: pair(x, m.g, m.w), **opts)
                fn = (lambda c: lambda: c(x))(compiled)
            else:
                compiled = torch.compile(lambda *a: pair(*a), **opts)
                fn = (lambda c: lambda: c(x, g, w))(compiled)
            out = fn()
            err = ((out.double() - ref).norm() / ref.norm()).item()
            print(f"{shape} {args.norm} {name}: error {err:.2e}; "
                  + ("; ".join(f"{r.fusion} {'REWRITTEN' if r.rewritten else 'unfused'}: {r.reason}"
                               for r in nfi.reports()) or "no site"), flush=True)
            fns[name] = fn
        wall = interleaved_medians(fns, 3, lambda fn: do_bench(fn, warmup=10, rep=40, return_mode="median"))
        graph = interleaved_medians(fns, 3, graph_ms)
        for name, fn in fns.items():
            print(f"  {name}: do_bench {wall[name] * 1e3:.1f} us, CUDA graph {graph[name] * 1e3:.1f} us", end="")
            if args.no_kernels:
                print(flush=True)
                continue
            per_call = kernel_times(fn, steps=20)["by_name"]  # ms per call of each kernel name
            print(f", kernels sum {sum(per_call.values()) * 1e3:.1f} us", flush=True)
            for key, ms in per_call.items():
                print(f"    {ms * 1e3:8.2f} us  {key[:110]}")
        print(f"  norm_fusion / default: do_bench {wall['default'] / wall['norm_fusion']:.3f}x, "
              f"CUDA graph {graph['default'] / graph['norm_fusion']:.3f}x", flush=True)


if __name__ == "__main__":
    main()
