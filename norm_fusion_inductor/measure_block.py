"""The unfused norm → attention → norm block compiled by torch.compile (default mode) against the fused op, timed
side by side at one site's shape: what the selection runs, in a child process, when the fused op does not beat
the block's lower bound (selection.choose_attention).

A lower bound of the unfused block (its attention alone plus copies of q) is all the selection can time inside
a compilation, and in training it bounds nothing: its attention term runs eager autograd (recommendation block,
silu, 768x512, H200, 2026-11-30: the "bound" read 3.99 ms, the compiled block 3.88 ms). The compiled block is the
honest alternative, but torch.compile cannot run inside the compilation that asks (Dynamo holds its compile
lock), hence the child process:

    python -m norm_fusion_inductor.measure_block '{"batch": 768, "q_len": 512, ...}'   # prints one JSON line

Inputs: the site's fields (selection.AttentionSite) as JSON, dtype and device as strings, and the parent's TF32
setting (allow_tf32) and max-autotune flag (max_autotune). Output: fused_ms and compiled_ms, medians of three
interleaved rounds of do_bench (forward, or forward + backward when "train"). Exits non-zero when the fused op
would not run its kernels here (its reference path must never be timed as "fused").
"""

from __future__ import annotations

import json
import statistics
import sys

import torch


def measure(site: dict) -> dict:
    from triton.testing import do_bench

    from .attention_ops import _kernel_reason, flash_norm_attention, norm_attention_block

    dev, dt = torch.device(site["device"]), getattr(torch, site["dtype"].replace("torch.", ""))
    torch.cuda.set_device(dev)  # Triton launches and do_bench time on the current device
    torch.backends.cuda.matmul.allow_tf32 = site.get("allow_tf32", False)
    B, L, Lk, H, D = (site[k] for k in ("batch", "q_len", "kv_len", "heads", "head_dim"))
    train, act = site["train"], site["activation"]
    q = torch.randn(B, L, H * D, device=dev, dtype=dt, requires_grad=train)
    k, v = (torch.randn(B, Lk, H * D, device=dev, dtype=dt, requires_grad=train) for _ in range(2))
    reason = _kernel_reason(q.view(B * L, H * D), k, v, H, act)
    if reason is not None:
        raise RuntimeError(f"the fused op would run its reference path here: {reason}")
    weights = [(1 + 0.1 * torch.randn(H * D, device=dev)).to(dt).requires_grad_(train) if site[name] else None
               for name in ("has_ln_weight", "has_ln_bias", "has_rms_weight")]
    scale = D ** -0.5 if act == "softmax" else 1.0 / Lk

    def block(q, k, v, *w):
        return norm_attention_block(q, k, v, H, *w, scale, act)

    # the mode the asking compilation runs in (its max-autotune flag): that is the block the site would get
    compiled = torch.compile(block, dynamic=False, mode="max-autotune-no-cudagraphs" if site.get("max_autotune")
                             else None)
    fns = {"fused_ms": lambda: flash_norm_attention(q, k, v, H, *weights, scale=scale, activation=act),
           "compiled_ms": lambda: compiled(q, k, v, *weights)}
    if train:
        leaves = [t for t in (q, k, v, *weights) if t is not None]
        grad = torch.randn_like(q)
        fns = {name: (lambda f=f: torch.autograd.grad(f(), leaves, grad)) for name, f in fns.items()}
    for f in fns.values():  # compile and warm up outside the timing
        f()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(3):
        for name, f in fns.items():
            times[name].append(do_bench(f, warmup=5, rep=30, return_mode="median"))
    return {name: statistics.median(t) for name, t in times.items()}


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
