"""Host time against GPU time of the fused op's forward + backward through autograd (the jagged reference rows),
to tell a host-bound measurement from a slow kernel: host ms per call (no synchronization inside the loop), wall
ms per call (synchronized at the end), do_bench's median, for each activation.

    python benchmarks/diagnostics/attention_host.py --heads 2 --max-len 512
"""

import argparse
import os
import sys
import time

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
import attention  # noqa: E402

op = torch.ops.norm_fusion.norm_attention


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--cached-launch", action="store_true",
                   help="launch through kernels.launch.cached_launch (tuning.attention_cached_launch)")
    args = p.parse_args()
    if args.cached_launch:
        from norm_fusion_inductor.kernels import tuning

        tuning.adopt(attention_cached_launch=True)
        print("cached launches", flush=True)
    for act in ("softmax", "silu"):
        q, k, v, offsets, weights = attention._operands(768, args.max_len, args.heads, 128, 128)
        scale = 128 ** -0.5 if act == "softmax" else 1.0 / 128
        leaves = [t.requires_grad_() for t in (q, k, v, *weights)]
        grad = torch.randn_like(q)

        def step():
            out = op(q, k, v, offsets, args.max_len, args.heads, *weights, scale, act, 1e-5, 1e-6)[0]
            return torch.autograd.grad(out, leaves, grad)

        step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        bench = triton.testing.do_bench(step, warmup=5, rep=50, return_mode="median")
        print(f"{act} H{args.heads} max{args.max_len}: host {1e3 * (t1 - t0) / args.calls:.3f} ms/call, "
              f"wall {1e3 * (t2 - t0) / args.calls:.3f} ms/call, do_bench {bench:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
