"""Quack's full autotune (not the shortlist) at the recsys tower shapes; the timing JSONs go to QUACK_CACHE_DIR."""
import sys, time, torch
from norm_fusion_inductor.kernels import epilogue_gemm as eg, quack_epilogue_gemm as qg
qg._shortlist = lambda device, epilogue: ()
cases = [(262144, 256, 1024, eg.Epilogue(row_norm="rms", bias=True, activation="silu")),
         (262144, 1024, 256, eg.Epilogue(bias=True, residual=True, stats="rms"))]
for M, K, N, e in cases:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    t = dict(bias=torch.randn(N, device="cuda"), scale=torch.rand(M, device="cuda") + 0.5 if e.row_norm != "none" else None,
             residual=torch.randn(M, N, device="cuda", dtype=torch.bfloat16) if e.residual else None)
    start = time.time()
    qg.epilogue_gemm(a, w, epilogue=e, **t)
    torch.cuda.synchronize()
    print(M, K, N, e, f"full autotune {time.time() - start:.1f} s", flush=True)
