"""Where the recommendation block's training step spends its GPU time, fused (policy "always") against
torch.compile default: torch.profiler over a few steps of the e2e case (loss inside the compiled model), kernels by
total device time, and the step's do_bench median. Written when the child-process measurement of the block
(fused 3.53 vs compiled 3.88 ms) disagreed with the step (fused 3.97 vs default 3.89 ms), H200, 2026-11-30.

    python benchmarks/diagnostics/profile_recsys_step.py [--batch 768 --seq 512 --kv-len 128 --hidden 512 --heads 4]
"""

import argparse

import torch
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench

from benchmarks.e2e import LossInside
from norm_fusion_inductor import attention_ops


def main():
    p = argparse.ArgumentParser()
    for name, default in (("batch", 768), ("seq", 512), ("kv-len", 128), ("hidden", 512), ("heads", 4)):
        p.add_argument(f"--{name}", type=int, default=default)
    a = p.parse_args()
    torch.manual_seed(0)
    block = attention_ops.NormAttentionBlock(a.hidden, a.heads).cuda().bfloat16()
    model = LossInside(block)
    q = torch.randn(a.batch, a.seq, a.hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(a.batch, a.kv_len, a.hidden, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for name, kwargs in (("default", {}),
                         ("norm_fusion", dict(backend="norm_fusion", options={"norm_fusion": {"policy": "always"}}))):
        torch._dynamo.reset()
        compiled = torch.compile(model, **kwargs)

        def step():
            for prm in model.parameters():
                prm.grad = None
            q.grad = None
            compiled(q=q, k=k, v=v).backward()

        step(), step()
        torch.cuda.synchronize()
        print(f"{name}: step {do_bench(step, warmup=5, rep=50, return_mode='median'):.3f} ms", flush=True)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        rows = [(e.key, e.device_time_total / 5e3, e.count // 5) for e in prof.key_averages() if e.device_time_total]
        for key, ms, n in sorted(rows, key=lambda r: -r[1])[:14]:
            print(f"  {name}: {ms:.3f} ms  x{n}  {key[:100]}", flush=True)


if __name__ == "__main__":
    main()
