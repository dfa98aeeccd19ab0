"""A recommendation-style attention block (LayerNorm → multi-head attention over a short KV → residual → RMSNorm
→ residual, as in the reference work's Kunlun blocks), written as plain model code and compiled with the
norm_fusion backend: the whole block becomes one fused op (norm_fusion::norm_attention) with its own backward.
A training step is checked against eager; then the jagged form (variable-length query sequences packed
row-wise, no padding) is called directly and checked against the padded eager block.

    python examples/recsys_block.py          # CPU (the reference op) or GPU (the Triton kernels)
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import norm_fusion_inductor
from norm_fusion_inductor import attention_ops


class RecsysAttentionBlock(nn.Module):
    """Queries q [B, Lq, H·D] attend to a short user-history sequence k, v [B, Lk, H·D] with SiLU attention
    (no softmax, scaled by 1/Lk)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.in_norm = nn.LayerNorm(width)
        self.out_norm = nn.RMSNorm(width)

    def forward(self, q, k, v):
        B, L, W = q.shape
        D = W // self.heads
        q_hat = self.in_norm(q)
        qh = q_hat.view(B, L, self.heads, D).transpose(1, 2)
        kh = k.view(B, -1, self.heads, D).transpose(1, 2)
        vh = v.view(B, -1, self.heads, D).transpose(1, 2)
        a = F.silu(qh @ kh.transpose(-2, -1)) / k.shape[1] @ vh
        x = a.transpose(1, 2).reshape(B, L, W) + q_hat
        return self.out_norm(x) + q


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.manual_seed(0)
    width, heads = (512, 4) if device == "cuda" else (64, 2)
    block = RecsysAttentionBlock(width, heads).to(device, dtype)
    q = torch.randn(8, 64, width, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(8, 32, width, device=device, dtype=dtype) for _ in range(2))

    policy = "always"  # show the rewrite; "auto" (the default) fuses only where measured faster
    result = norm_fusion_inductor.explain(block, q, k, v, train=True, policy=policy, fusions=("norm_attention",))
    out = result.compiled(q, k, v)  # the model explain compiled: no second compile
    (grad_q,) = torch.autograd.grad(out.square().sum(), q)
    ref = block(q, k, v)
    (ref_grad_q,) = torch.autograd.grad(ref.square().sum(), q)
    print(f"device={device} dtype={dtype}: training step, rel. error vs eager: out {rel_err(out, ref):.2e}, "
          f"dq {rel_err(grad_q, ref_grad_q):.2e}")
    assert rel_err(out, ref) < tol and rel_err(grad_q, ref_grad_q) < tol
    print(result)

    # jagged queries: sequences of 5, 64 and 17 rows packed into one [T, W] tensor, no padding
    lengths = torch.tensor([5, 64, 17])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(device)
    rows = torch.randn(int(lengths.sum()), width, device=device, dtype=dtype)
    out = norm_fusion_inductor.flash_norm_attention(
        rows, k[:3], v[:3], heads, block.in_norm.weight, block.in_norm.bias, block.out_norm.weight,
        activation="silu", ln_eps=block.in_norm.eps, rms_eps=torch.finfo(dtype).eps, offsets=offsets, max_len=64)
    ref = attention_ops.norm_attention_reference(
        rows, k[:3], v[:3], offsets, 64, heads, block.in_norm.weight, block.in_norm.bias, block.out_norm.weight,
        1.0 / k.shape[1], "silu", block.in_norm.eps, torch.finfo(dtype).eps)[0]
    print(f"jagged rows {tuple(rows.shape)}: rel. error vs the padded eager block {rel_err(out, ref):.2e}")
    assert rel_err(out, ref) < tol


if __name__ == "__main__":
    main()
