"""Print what Inductor generates for one RMSNorm → linear site with the plugin (policy "always"): the kernel
launches of the call() function, to check the fused kernel is launched directly and nothing copies x first.

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
    # the binaries Inductor launched, next to the ones Triton's own JIT built for the same kernel
    from torch._inductor.codecache import PyCodeCache

    from norm_fusion_inductor.kernels import norm_gemm as kern

    def describe(b):
        md = b.metadata
        return (f"warps {md.num_warps} stages {md.num_stages} shared {getattr(md, 'shared', '?')} "
                f"regs {getattr(b, 'n_regs', '?')} spills {getattr(b, 'n_spills', '?')}")

    for mod in list(PyCodeCache.modules):
        k = getattr(mod, "norm_gemm_kernel_0", None)
        for launcher in getattr(k, "launchers", []):
            print("inductor launcher config:", getattr(launcher, "config", "?"))
        for result in getattr(k, "compile_results", []):
            binary = getattr(result, "kernel", None)
            if binary is not None:
                print("inductor:", describe(binary), dict(binary.src.constants) if hasattr(binary, "src") else "")
    from triton.testing import do_bench_cudagraph

    from norm_fusion_inductor import selection

    plans = [v["plan"] for v in selection._MEMORY.values() if v.get("plan")]
    print("plan of the site:", plans)
    print("plugin", do_bench_cudagraph(lambda: c(x, g, w), return_mode="median"))
    for plan in plans:
        plan = tuple(plan)
        print("jit, same plan", do_bench_cudagraph(lambda: kern.rms_norm_matmul(x, g, w, None, 1e-6, plan=plan),
                                                   return_mode="median"))
    print("jit, tuned now", kern.tuned_plan(x, w, g, None, 1e-6),
          do_bench_cudagraph(lambda: kern.rms_norm_matmul(x, g, w, None, 1e-6), return_mode="median"))
    for cache in kern.norm_gemm_kernel.device_caches.values():
        for binary in cache[0].values():
            print("jit:", describe(binary))


if __name__ == "__main__":
    main()
