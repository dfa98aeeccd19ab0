"""Narrow call_e's wrong case to a plain-torch repro (no plugin): one pre-norm attention block, bf16, trained, one
head of dim D over L tokens, causal SDPA; the block's weight gradients of torch.compile (Inductor) against float64
and eager's, under variants. Usage: python inductor_repro.py  (all variants, one process; GPU)"""
import copy
import itertools
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, head_dim, qk_norm, rope):
        super().__init__()
        self.heads, self.head_dim, self.rope = d // head_dim, head_dim, rope
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.q_norm = nn.RMSNorm(head_dim, eps=1e-6) if qk_norm else None
        self.k_norm = nn.RMSNorm(head_dim, eps=1e-6) if qk_norm else None
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))

    def forward(self, x):  # x [L, d]: one sequence, as the fuzz's 2-D input
        h = self.norm(x)
        q, k, v = (p(h).view(x.shape[0], self.heads, self.head_dim) for p in (self.q, self.k, self.v))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))
        if self.rope:
            angles = torch.arange(x.shape[0], device=x.device).float()[:, None] * self.inv_freq[None, :]
            angles = torch.cat((angles, angles), -1)
            cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
            half = self.head_dim // 2
            rot = lambda t: torch.cat((-t[..., half:], t[..., :half]), -1)  # noqa: E731
            q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o(o.transpose(0, 1).reshape(x.shape))


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def check(L, d, head_dim, qk_norm, rope, dtype=torch.bfloat16):
    torch.manual_seed(0)
    model = Block(d, head_dim, qk_norm, rope).cuda().to(dtype)
    model64, eager = copy.deepcopy(model).double(), copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model)
    x = torch.randn(L, d, device="cuda")
    xs = [x.to(dtype).requires_grad_(), x.double().requires_grad_(), x.to(dtype).requires_grad_()]
    outs = [m(t) for m, t in zip((compiled, model64, eager), xs)]
    g = torch.randn_like(outs[1])
    for o in outs:
        o.backward(g.to(o.dtype))
    worst = max(((n, rel(p.grad, p64.grad), rel(pe.grad, p64.grad)) for (n, p), p64, pe in
                 zip(model.named_parameters(), model64.parameters(), eager.parameters())), key=lambda t: t[1] / t[2])
    print(f"L={L} d={d} head_dim={head_dim} qk_norm={qk_norm} rope={rope}: output {rel(outs[0], outs[1]):.2e} "
          f"(eager {rel(outs[2], outs[1]):.2e}); worst gradient {worst[0]} {worst[1]:.2e} (eager {worst[2]:.2e})",
          flush=True)


if __name__ == "__main__":
    check(2853, 1000, 1000, True, True)  # call_e's case, reduced to its attention block
    for L, (d, hd), qk, rope in itertools.product([2853, 2048], [(1000, 1000), (1024, 1024), (1024, 128)],
                                                   [True, False], [True, False]):
        try:
            check(L, d, hd, qk, rope)
        except Exception as e:  # noqa: BLE001
            print(f"L={L} d={d} head_dim={hd} qk_norm={qk} rope={rope}: {type(e).__name__}: {e}"[:300], file=sys.stderr)
