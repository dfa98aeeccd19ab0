"""Where a cold compile of the LN tower's epilogue GEMM goes (Triton's compilation listener: each stage's seconds,
cache hit or not), and the C launcher's build (_init_handles); then a second JIT compile in a new process would be a
hit. Run with an empty TRITON_CACHE_DIR."""
import time

import torch
import triton

from norm_fusion_inductor import regrouped

events = []


def listener(*, src, metadata, metadata_group, times, cache_hit):
    events.append((metadata["name"], cache_hit, times))


triton.knobs.compilation.listener = listener
M, K, N = 131072, 512, 1024
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
vec = lambda n: torch.rand(n, device="cuda", dtype=torch.float32) + 0.5  # noqa: E731
config = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=3, num_warps=8, FLATTEN=True,
              WARP_SPECIALIZE=False, CTAS_PER_SM=1)
for flatten in (True, False):
    start = time.perf_counter()
    regrouped.run_epilogue_gemm(a, w, vec(N), None, vec(M), vec(M), vec(N), "ln", "gelu", False, "none", False,
                                config=dict(config, FLATTEN=flatten))
    torch.cuda.synchronize()
    print(f"FLATTEN={flatten}: first launch {time.perf_counter() - start:.2f} s")
for name, hit, times in events:
    stages = ", ".join(f"{k} {v / 1e6:.2f}" for k, v in times.lowering_stages) if hasattr(times, "lowering_stages") \
        else str(times)
    print(f"  {name}: hit {hit}, ir {getattr(times, 'ir_initialization', 0) / 1e6:.2f} s, stages: {stages}")
