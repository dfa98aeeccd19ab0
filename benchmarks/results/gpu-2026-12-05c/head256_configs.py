"""Forty-second session, call_c: more block configs for the head_dim-256 q projection with QK-norm + RoPE (the
offered 128x256 tile spills 500 bytes and runs 1.6x cuBLAS at Qwen3-Next's q, call_a): the grid of
``benchmarks/diagnostics/epilogue_configs.py`` with candidate configs added to ``GPU_CONFIGS`` for this run only."""
import sys

sys.path.insert(0, "benchmarks/diagnostics")
import epilogue_configs  # noqa: E402
from norm_fusion_inductor.kernels import epilogue_gemm as eg  # noqa: E402

BASE = dict(GROUP_M=8, FLATTEN=False, WARP_SPECIALIZE=False)
EXTRA = [dict(BASE, BLOCK_M=bm, BLOCK_N=256, BLOCK_K=bk, num_stages=s, num_warps=w, CTAS_PER_SM=c)
         for bm, bk, s, w, c in [(64, 64, 4, 4, 1), (64, 64, 4, 8, 1), (64, 64, 3, 4, 2), (128, 64, 2, 8, 1),
                                 (128, 32, 4, 8, 1), (64, 128, 2, 8, 1), (128, 64, 3, 4, 1)]]
eg.GPU_CONFIGS = eg.GPU_CONFIGS + EXTRA
epilogue_configs.grid(3, sys.argv[1] if len(sys.argv) > 1 else None, [
    "per_head:16384x2048x8192:rope=1:head_dim=256:rope_dim=64:head_gates=1",
    "per_head:8192x2560x2048:rope=1:head_dim=256",
    "per_head:16384x4096x4096:rope=1:head_dim=128"])
