"""Print what Inductor generates for one RMSNorm → linear site with the plugin (policy "always", the regrouped
rewrite): the kernel launches of the call() function, to check the epilogue GEMM is launched directly and nothing
copies x first.

    python benchmarks/diagnostics/launch_code.py [MxKxN] [--norm ln] [--full]
"""

import sys

import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

import norm_fusion_inductor as nfi


def main():
    shape = next((a for a in sys.argv[1:] if "x" in a and not a.startswith("-")), "262144x256x256")
    M, K, N = (int(v) for v in shape.split("x"))
    ln = "--norm" in sys.argv and sys.argv[sys.argv.index("--norm") + 1] == "ln"
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = torch.rand(K, device="cuda", dtype=torch.bfloat16) + 0.5
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K**0.5

    def fn(x, g, w):
        h = F.layer_norm(x, (K,), g, g, 1e-5) if ln else F.rms_norm(x, (K,), g, 1e-6)
        return F.linear(h, w)

    c = torch.compile(fn, backend="norm_fusion", options={"norm_fusion": {"policy": "always",
                                                                          "fusions": nfi.FUSIONS}})
    _, code = run_and_get_code(c, x, g, w)
    for site in nfi.reports():
        print(site.implementation, site.reason)
    src = code[0]
    if "--full" in sys.argv:
        print(src)
        return
    body = src[src.index("def call("):] if "def call(" in src else src
    print("\n".join(line for line in src.splitlines() if "user_autotune" in line or "triton_meta=" in line))
    print("\n".join(line for line in body.splitlines()
                    if any(k in line for k in (".run(", "clone", "copy", "extern", "empty"))))


if __name__ == "__main__":
    main()
