"""QK-norm attention as an op: the per-head RMSNorm of q and k, the rotary embedding after it (optional) and
scaled-dot-product attention, as HF model code writes them (Qwen3: HF's plain RMSNorm per head).

``torch.ops.norm_fusion.qk_norm_attention(q, k, v, q_weight, k_weight, cos, sin, q_eps, k_eps, scale, causal,
save_q_hat) -> (out, lse, q_rrms, k_rrms, q_hat, k_hat)``
    q [B, Hq, L, D], k, v [B, Hk, S, D] (Hq a multiple of Hk: grouped-query attention); cos, sin [B|1, L, D] or
    None. out [B, Hq, L, D] is ``qk_norm_attention_reference``; lse (base 2), the norms' rrms and the normalized,
    rotated q̂ (empty unless ``save_q_hat``) and k̂ [B, Hk, S, D] are saved for the backward. k̂ is also what a KV
    cache stores: the pattern hands it to the cache's readers.

``qk_norm_attention(q, k, v, ...)`` is the user-facing function.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .kernels import qk_norm_attention as kernels
from .ops import _cpu_reason, _warn_once


def rms_norm_rope(x: Tensor, weight: Tensor, eps: float, cos: Optional[Tensor], sin: Optional[Tensor]) -> Tensor:
    """HF's per-head RMSNorm (computed in fp32, rounded, times the weight) and apply_rotary_pos_emb of x
    [B, H, L, D]; cos, sin [B|1, L, D]."""
    acc = torch.promote_types(x.dtype, torch.float32)
    h = x.to(acc)
    n = weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    if cos is None:
        return n
    half = x.shape[-1] // 2
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return n * cos + torch.cat((-n[..., half:], n[..., :half]), -1) * sin


def qk_norm_attention_reference(q, k, v, q_weight, k_weight, cos, sin, q_eps, k_eps, scale, causal) -> Tensor:
    q_hat = rms_norm_rope(q, q_weight, q_eps, cos, sin)
    k_hat = rms_norm_rope(k, k_weight, k_eps, cos, sin)
    if q.shape[1] != k.shape[1]:  # grouped-query: each kv head serves Hq/Hk query heads
        groups = q.shape[1] // k.shape[1]
        k_hat, v = k_hat.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    return F.scaled_dot_product_attention(q_hat, k_hat, v, is_causal=causal, scale=scale)


def site_operands(batch, q_len, kv_len, heads, kv_heads, head_dim, rope, device, dtype, requires_grad=False):
    """Random operands of a QK-norm site as its graph holds them: q [B, Hq, L, D] and k, v [B, Hk, S, D] (heads
    split by view + transpose), the two norm weights near 1, cos and sin [1, L, D] or None."""
    q = torch.randn(batch, q_len, heads, head_dim, device=device, dtype=dtype).transpose(1, 2)
    k, v = (torch.randn(batch, kv_len, kv_heads, head_dim, device=device, dtype=dtype).transpose(1, 2)
            for _ in range(2))
    wq, wk = ((1 + 0.1 * torch.randn(head_dim, device=device)).to(dtype) for _ in range(2))
    cos = sin = None
    if rope:
        angles = torch.rand(1, q_len, head_dim, device=device)
        cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    return (*(t.requires_grad_(requires_grad) for t in (q, k, v, wq, wk)), cos, sin)


def _kernel_reason(q, k, v, cos) -> Optional[str]:
    return _cpu_reason(q) or kernels.unsupported_reason(q, k, v, cos is not None)


@torch.library.custom_op("norm_fusion::qk_norm_attention", mutates_args=())
def qk_norm_attention_op(q: Tensor, k: Tensor, v: Tensor, q_weight: Tensor, k_weight: Tensor, cos: Optional[Tensor],
                         sin: Optional[Tensor], q_eps: float, k_eps: float, scale: float, causal: bool,
                         save_q_hat: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    reason = _kernel_reason(q, k, v, cos)
    if reason is None:
        return kernels.forward(q, k, v, q_weight, k_weight, cos, sin, q_eps, k_eps, scale, causal, save_q_hat)
    if q.is_cuda:
        _warn_once(reason)
    out = qk_norm_attention_reference(q, k, v, q_weight, k_weight, cos, sin, q_eps, k_eps, scale, causal)
    out = out.transpose(1, 2).contiguous().transpose(1, 2)  # the kernel's layout, as the fake says
    q_rrms, k_rrms = (_rrms(t, eps) for t, eps in ((q, q_eps), (k, k_eps)))
    q_hat = rms_norm_rope(q, q_weight, q_eps, cos, sin).contiguous() if save_q_hat else q.new_zeros(0)
    k_hat = rms_norm_rope(k, k_weight, k_eps, cos, sin).contiguous()
    # no log-sum-exp here: the reference path's backward differentiates the reference again
    return out, q.new_zeros(q.shape[:3], dtype=torch.float32), q_rrms, k_rrms, q_hat, k_hat


def _rrms(x, eps):
    return torch.rsqrt(x.to(torch.promote_types(x.dtype, torch.float32)).pow(2).mean(-1) + eps).float()


@qk_norm_attention_op.register_fake
def _(q, k, v, q_weight, k_weight, cos, sin, q_eps, k_eps, scale, causal, save_q_hat):
    B, HQ, L, D = q.shape
    stats = [q.new_empty(B, HQ, L, dtype=torch.float32) for _ in range(2)]
    return (q.new_empty(B, L, HQ, D).transpose(1, 2), *stats, k.new_empty(k.shape[:3], dtype=torch.float32),
            q.new_empty((B, HQ, L, D) if save_q_hat else (0,)), k.new_empty(k.shape))


@torch.library.custom_op("norm_fusion::qk_norm_attention_backward", mutates_args=())
def qk_norm_attention_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, q_weight: Tensor,
                               k_weight: Tensor, cos: Optional[Tensor], sin: Optional[Tensor], q_eps: float,
                               scale: float, causal: bool, out: Tensor, lse: Tensor, q_rrms: Tensor,
                               k_rrms: Tensor, q_hat: Tensor, k_hat: Tensor
                               ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dw_q, dw_k) by the Triton kernels: an op of its own so that AOTAutograd traces the backward."""
    reason = _kernel_reason(q, k, v, cos)
    if reason is not None:
        raise RuntimeError(f"qk_norm_attention_backward: the kernels cannot take these operands ({reason})")
    return kernels.backward(grad_out, q, k, v, q_weight, k_weight, cos, sin, q_eps, scale, causal, out, lse,
                            q_rrms, k_rrms, q_hat, k_hat)


@qk_norm_attention_backward.register_fake
def _(grad_out, q, k, v, q_weight, k_weight, *_):
    def like(t):  # the kernels write gradients in [B, L, H, D] memory order
        return t.new_empty(t.shape[0], t.shape[2], t.shape[1], t.shape[3]).transpose(1, 2)

    return like(q), like(k), like(v), torch.empty_like(q_weight), torch.empty_like(k_weight)


def _setup_context(ctx, inputs, output):
    q, k, v, q_weight, k_weight, cos, sin, q_eps, k_eps, scale, causal, _ = inputs
    ctx.save_for_backward(q, k, v, q_weight, k_weight, cos, sin, *output)
    ctx.scalars = (q_eps, k_eps, scale, causal)
    ctx.mark_non_differentiable(*output[1:])


def _backward(ctx, grad_out, *_grad_saved):
    q, k, v, q_weight, k_weight, cos, sin, out, lse, q_rrms, k_rrms, q_hat, k_hat = ctx.saved_tensors
    q_eps, k_eps, scale, causal = ctx.scalars
    if _kernel_reason(q, k, v, cos) is None:
        grads = torch.ops.norm_fusion.qk_norm_attention_backward(
            grad_out, q, k, v, q_weight, k_weight, cos, sin, q_eps, scale, causal, out, lse, q_rrms, k_rrms,
            q_hat, k_hat)
    else:  # differentiate the reference, recomputed
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (q, k, v, q_weight, k_weight)]
            ref = qk_norm_attention_reference(*leaves, cos, sin, q_eps, k_eps, scale, causal)
            grads = torch.autograd.grad(ref, leaves, grad_out)
    return (*grads, None, None, None, None, None, None, None)


qk_norm_attention_op.register_autograd(_backward, setup_context=_setup_context)


def qk_norm_attention(q: Tensor, k: Tensor, v: Tensor, q_weight: Tensor, k_weight: Tensor,
                      cos: Optional[Tensor] = None, sin: Optional[Tensor] = None, q_eps: float = 1e-6,
                      k_eps: float = 1e-6, scale: Optional[float] = None, causal: bool = False) -> Tensor:
    """``qk_norm_attention_reference`` fused: q [B, Hq, L, D], k, v [B, Hk, S, D], the norm weights [D], the
    rotary tables cos, sin [B|1, L, D] (or None for no rotary embedding). ``scale`` defaults to 1/sqrt(D)."""
    if (cos is None) != (sin is None):
        raise ValueError("cos and sin: pass both or neither")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    save = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, q_weight, k_weight))
    return qk_norm_attention_op(q, k, v, q_weight, k_weight, cos, sin, q_eps, k_eps, scale, causal, save)[0]
