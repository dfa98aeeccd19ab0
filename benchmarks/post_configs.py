"""Time post-norm block configs side by side at one shape (exploration; the tuned candidates live in
norm_fusion_inductor/kernels/norm_gemm.py)."""
import sys

import torch
from triton.testing import do_bench_cudagraph

from norm_fusion_inductor.kernels import norm_gemm

M, K, N = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "262144x256x256").split("x"))
exchange = "row" if N <= 256 else "spin"
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
w = (torch.randn(N, K, device="cuda") / K**0.5).bfloat16()
b, g = torch.randn(N, device="cuda").bfloat16(), torch.rand(N, device="cuda").bfloat16() + 0.5
r = torch.randn(M, N, device="cuda").bfloat16()
ref = torch.nn.functional.rms_norm((torch.addmm(b, x, w.t()) + r).float(), (N,), g.float(), 1e-5)
mm = do_bench_cudagraph(lambda: torch.addmm(b, x, w.t()), rep=30)
print(f"{M}x{K}x{N} cuBLAS addmm {mm:.4f} ms")
for bm, bn, bk, st, wp, fl in [(128, 256, 64, 3, 8, False), (128, 256, 64, 2, 8, True), (64, 256, 64, 3, 4, True),
                               (64, 256, 64, 4, 4, False), (128, 256, 128, 2, 8, False), (128, 128, 64, 4, 8, True),
                               (128, 128, 64, 4, 4, False)]:
    if bn < N and exchange == "row":
        continue
    cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1 if exchange == "spin" else 8, num_stages=st,
               num_warps=wp, WARP_SPECIALIZE=False, FLATTEN=fl)
    run = lambda: norm_gemm.matmul_norm(x, w, b, r, g, None, 1e-5, layer_norm=False, plan=(exchange, cfg))
    try:
        y = run()[0]
        err = ((y.float() - ref).norm() / ref.norm()).item()
        print(cfg, f"{do_bench_cudagraph(run, rep=30):.4f} ms err {err:.1e}", flush=True)
    except Exception as e:
        print(cfg, type(e).__name__, str(e)[:100], flush=True)
