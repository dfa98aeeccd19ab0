"""Which SDPA backend is the one to beat: each backend of F.scaled_dot_product_attention timed alone (median ms,
not interleaved) at the QK-norm LLM shape, causal, GQA by enable_gqa.

    python3 benchmarks/diagnostics/sdpa_backends.py [--shape 4x4096x32x8x128]
"""

import argparse

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shape", default="4x4096x32x8x128", help="batch x seq x heads x kv_heads x head_dim")
    B, L, HQ, HK, D = (int(s) for s in p.parse_args().shape.split("x"))
    q = torch.randn(B, HQ, L, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, HK, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for name, backend in [("default", None), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        def run(backend=backend):
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        try:
            print(name, round(triton.testing.do_bench(run, rep=50, return_mode="median"), 3), "ms", flush=True)
        except RuntimeError as e:  # a backend that cannot take these operands
            print(name, "error", str(e)[:120], flush=True)


if __name__ == "__main__":
    main()
