"""Why is a site the plugin left unfused slower than torch.compile's default? The kernels each compiled graph
launches, and both timed side by side (GPU).

    python benchmarks/diagnostics/unfused_diff.py --norm ln --shape 65536x256x256
"""
import argparse
import re

import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code
from triton.testing import do_bench

import norm_fusion_inductor as nfi


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--norm", default="ln")
    p.add_argument("--shape", default="65536x256x256")
    args = p.parse_args()
    M, K, N = (int(v) for v in args.shape.split("x"))
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)

    def block(x, g, w):
        if args.norm == "ln":
            h = F.layer_norm(x, (K,), g, 0.5 * g, 1e-5)
        else:
            h = F.rms_norm(x, (K,), g, 1e-5)
        return h @ w.t()

    fns = {}
    for label, kw in (("default", {}), ("plugin", {"backend": "norm_fusion"})):
        torch._dynamo.reset()
        fn = torch.compile(block, **kw)
        _, code = run_and_get_code(fn, x, g, w)
        print(f"{label}: the generated code's launches")
        for line in "\n".join(code).splitlines():
            if re.search(r"\.run\(|extern_kernels\.|\[grid|triton_kernel_wrapper", line):
                print(f"   {line.strip()[:160]}")
        fns[label] = lambda fn=fn: fn(x, g, w)
    print("reports:", [(s.rewritten, s.reason) for s in nfi.reports()])
    for _ in range(2):
        print({k: round(do_bench(f, warmup=10, rep=50, return_mode="median"), 4) for k, f in fns.items()})


if __name__ == "__main__":
    main()
