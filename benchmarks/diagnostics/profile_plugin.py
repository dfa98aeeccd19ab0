"""Where the plugin's time goes at one shape: torch.profiler over the compiled norm→linear (plugin vs default)
and the bare fused kernel, plus do_bench of each.

    python benchmarks/diagnostics/profile_plugin.py 262144x1024x256
"""
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench, do_bench_cudagraph

import norm_fusion_inductor as nfi
from norm_fusion_inductor.kernels import norm_gemm as kern

EPS = 1e-6


def fn(x, g, w):
    return F.linear(F.rms_norm(x, (x.shape[-1],), g, EPS), w)


for shape in sys.argv[1:]:
    M, K, N = (int(v) for v in shape.split("x"))
    torch._dynamo.reset()
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    g = (1 + 0.1 * torch.randn(K, device="cuda")).to(torch.bfloat16)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
    plugin = torch.compile(fn, backend="norm_fusion", options={"norm_fusion": {"policy": "always"}})
    default = torch.compile(fn)
    plugin(x, g, w), default(x, g, w)
    fk = lambda: kern.rms_norm_matmul(x, g, w, None, EPS)  # noqa: E731
    print(f"== {shape}: plan {kern.tuned_plan(x, w, g, None, EPS)}")
    for name, f in {"plugin": lambda: plugin(x, g, w), "default": lambda: default(x, g, w), "kernel": fk}.items():
        print(f"  {name}: do_bench {do_bench(f, return_mode='median'):.4f}  cudagraph "
              f"{do_bench_cudagraph(f, return_mode='median'):.4f}")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            plugin(x, g, w)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=60))
