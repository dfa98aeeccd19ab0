"""The norm → attention → norm op ("FlashNormAttention", design.md §1.5) and the eager block it replaces.

``torch.ops.norm_fusion.norm_attention(q, k, v, offsets, max_len, heads, ln_weight, ln_bias, rms_weight, scale,
activation, ln_eps, rms_eps) -> (out, mean, rstd, rrms, lse, x)``
    q [T, H·D]: the rows of B sequences, sequence b owning rows offsets[b] .. offsets[b+1] (int32/int64 [B+1],
    ``max_len`` ≥ the longest); k, v [B, L, H·D]. out [T, H·D] is ``norm_attention_block`` of each sequence;
    mean, rstd (the LayerNorm's) and rrms (the RMSNorm's) [T] fp32; lse [T, H] fp32 for softmax, else empty;
    x [T, H·D] the RMSNorm's input (attention + q̂), which the backward reads.

``flash_norm_attention(q, k, v, ...)`` is the user-facing function: dense q [B, Lq, H·D] or jagged q [T, H·D]
with offsets.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .kernels import norm_attention as kernels
from .ops import _cpu_reason, _warn_once

ACTIVATION_FNS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda s: F.gelu(s, approximate="tanh"),
    "silu": F.silu,
    "relu2": lambda s: torch.relu(s).square(),
}


def norm_attention_block(q: Tensor, k: Tensor, v: Tensor, heads: int, ln_weight: Optional[Tensor],
                         ln_bias: Optional[Tensor], rms_weight: Optional[Tensor], scale: float,
                         activation: str = "softmax", ln_eps: float = 1e-5, rms_eps: float = 1e-6) -> Tensor:
    """The eager block on dense q [B, Lq, H·D], k, v [B, L, H·D], as model code writes it."""
    return _block(q, k, v, heads, ln_weight, ln_bias, rms_weight, scale, activation, ln_eps, rms_eps)[0]


def _block(q, k, v, heads, ln_weight, ln_bias, rms_weight, scale, activation, ln_eps, rms_eps, stats=False):
    """out, and with ``stats`` the op's saved tensors (mean, rstd, rrms [B, Lq], lse [B, Lq, H] or None,
    x [B, Lq, H·D])."""
    B, Lq, width = q.shape
    head_dim = width // heads
    q_hat = F.layer_norm(q, (width,), ln_weight, ln_bias, ln_eps)
    qh = q_hat.view(B, Lq, heads, head_dim).transpose(1, 2)
    kh = k.view(B, -1, heads, head_dim).transpose(1, 2)
    vh = v.view(B, -1, heads, head_dim).transpose(1, 2)
    if activation == "softmax":
        a = F.scaled_dot_product_attention(qh, kh, vh, scale=scale)
    else:
        a = (ACTIVATION_FNS[activation](qh @ kh.transpose(-2, -1)) * scale) @ vh
    x = a.transpose(1, 2).reshape(B, Lq, width) + q_hat
    out = F.rms_norm(x, (width,), rms_weight, rms_eps) + q
    if not stats:
        return out, None
    with torch.no_grad():
        acc = torch.promote_types(q.dtype, torch.float32)
        var, mean = torch.var_mean(q.to(acc), -1, correction=0)
        rrms = torch.rsqrt(x.to(acc).pow(2).mean(-1) + rms_eps)
        lse = None
        if activation == "softmax":
            lse = torch.logsumexp((qh @ kh.transpose(-2, -1)).to(acc) * scale, -1).transpose(1, 2)
    return out, (mean, torch.rsqrt(var + ln_eps), rrms, lse, x.detach())


class NormAttentionBlock(torch.nn.Module):
    """``norm_attention_block`` as a module (nn.LayerNorm, nn.RMSNorm), for benchmarks: a recommendation-style
    block whose queries attend to a short sequence k, v."""

    def __init__(self, width: int, heads: int, activation: str = "silu"):
        super().__init__()
        self.heads, self.activation = heads, activation
        self.in_norm, self.out_norm = torch.nn.LayerNorm(width), torch.nn.RMSNorm(width)

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        scale = (q.shape[-1] // self.heads) ** -0.5 if self.activation == "softmax" else 1.0 / k.shape[1]
        return norm_attention_block(q, k, v, self.heads, self.in_norm.weight, self.in_norm.bias,
                                    self.out_norm.weight, scale, self.activation, self.in_norm.eps,
                                    torch.finfo(q.dtype).eps if self.out_norm.eps is None else self.out_norm.eps)


def padding_index(offsets: Tensor, total: int) -> tuple[Tensor, Tensor]:
    """(sequence, position) of each of the T rows."""
    rows = torch.arange(total, device=offsets.device)
    seq = torch.searchsorted(offsets[1:].to(torch.int64), rows, right=True)
    return seq, rows - offsets.to(torch.int64)[seq]


def norm_attention_reference(q, k, v, offsets, max_len, heads, ln_weight, ln_bias, rms_weight, scale, activation,
                             ln_eps, rms_eps):
    """The op in torch ops (differentiable): the rows padded to [B, max_len, H·D], the eager block, unpadded.
    The statistics are in the promoted dtype (fp32 for 16-bit inputs, fp64 for fp64)."""
    seq, pos = padding_index(offsets, q.shape[0])
    padded = q.new_zeros(k.shape[0], max_len, q.shape[1]).index_put((seq, pos), q)
    out, (mean, rstd, rrms, lse, x) = _block(padded, k, v, heads, ln_weight, ln_bias, rms_weight, scale,
                                             activation, ln_eps, rms_eps, stats=True)
    lse = lse[seq, pos] if lse is not None else mean.new_empty(0, heads)
    return out[seq, pos], mean[seq, pos], rstd[seq, pos], rrms[seq, pos], lse, x[seq, pos]


def _kernel_reason(q, k, v, heads, activation) -> Optional[str]:
    return _cpu_reason(q) or kernels.unsupported_reason(q, k, v, heads, activation)


@torch.library.custom_op("norm_fusion::norm_attention", mutates_args=())
def norm_attention(q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, max_len: int, heads: int,
                   ln_weight: Optional[Tensor], ln_bias: Optional[Tensor], rms_weight: Optional[Tensor],
                   scale: float, activation: str, ln_eps: float, rms_eps: float
                   ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    args = (q, k, v, offsets, max_len, heads, ln_weight, ln_bias, rms_weight, scale, activation)
    reason = _kernel_reason(q, k, v, heads, activation)
    if reason is None:
        return kernels.forward(*args, ln_eps, rms_eps)
    if q.is_cuda:
        _warn_once(reason)
    return tuple(t.detach().contiguous() for t in norm_attention_reference(*args, ln_eps, rms_eps))


@norm_attention.register_fake
def _(q, k, v, offsets, max_len, heads, ln_weight, ln_bias, rms_weight, scale, activation, ln_eps, rms_eps):
    T = q.shape[0]
    stats = [q.new_empty(T, dtype=torch.float32) for _ in range(3)]
    return (q.new_empty(q.shape), *stats, q.new_empty(T if activation == "softmax" else 0, heads,
                                                      dtype=torch.float32), q.new_empty(q.shape))


@torch.library.custom_op("norm_fusion::norm_attention_backward", mutates_args=())
def norm_attention_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, max_len: int,
                            heads: int, ln_weight: Optional[Tensor], ln_bias: Optional[Tensor],
                            rms_weight: Optional[Tensor], scale: float, activation: str, ln_eps: float,
                            rms_eps: float, mean: Tensor, rstd: Tensor, rrms: Tensor, lse: Tensor, x: Tensor,
                            kv_grad: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dγ, dβ, dw) of norm_attention by the Triton kernels; a norm weight's gradient is empty where
    the weight is None, dk and dv where ``kv_grad`` is False (neither needs a gradient: the dK/dV kernel does not
    run). An op of its own so that AOTAutograd traces the backward (fake implementation) instead of
    running it. Operands the kernels cannot take are differentiated through the reference by the autograd
    formula instead (autograd is off inside an op)."""
    reason = _kernel_reason(q, k, v, heads, activation)
    if reason is not None:
        raise RuntimeError(f"norm_attention_backward: the kernels cannot take these operands ({reason})")
    grads = kernels.backward(grad_out, q, k, v, offsets, max_len, heads, ln_weight, ln_bias, rms_weight, scale,
                             activation, mean, rstd, rrms, lse, x, kv_grad=kv_grad)
    return tuple(g if g is not None else q.new_empty(0) for g in grads)


@norm_attention_backward.register_fake
def _(grad_out, q, k, v, offsets, max_len, heads, ln_weight, ln_bias, rms_weight, *_, kv_grad=True):
    kv = (torch.empty_like(k), torch.empty_like(v)) if kv_grad else (k.new_empty(0), v.new_empty(0))
    return (torch.empty_like(q), *kv,
            *(torch.empty_like(w) if w is not None else q.new_empty(0) for w in (ln_weight, ln_bias, rms_weight)))


_TENSORS = (0, 1, 2, 3, 6, 7, 8)  # q, k, v, offsets, ln_weight, ln_bias, rms_weight
_SCALARS = (4, 5, 9, 10, 11, 12)  # max_len, heads, scale, activation, ln_eps, rms_eps


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*(inputs[i] for i in _TENSORS), *output[1:])
    ctx.scalars = [inputs[i] for i in _SCALARS]
    ctx.mark_non_differentiable(*output[1:])


def _backward(ctx, grad_out, *_grad_stats):
    q, k, v, offsets, ln_weight, ln_bias, rms_weight, mean, rstd, rrms, lse, x = ctx.saved_tensors
    max_len, heads, scale, activation, ln_eps, rms_eps = ctx.scalars
    weights = (ln_weight, ln_bias, rms_weight)
    if _kernel_reason(q, k, v, heads, activation) is None:
        kv_grad = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]  # traced: the graph's requires_grad
        grads = torch.ops.norm_fusion.norm_attention_backward(
            grad_out.contiguous(), q, k, v, offsets, max_len, heads, *weights, scale, activation, ln_eps, rms_eps,
            mean, rstd, rrms, lse, x, kv_grad)
        grads = [g if t is not None and (kv_grad or i not in (1, 2)) else None
                 for i, (g, t) in enumerate(zip(grads, (q, k, v, *weights)))]
    else:  # differentiate the reference, recomputed
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() if t is not None else None for t in (q, k, v, *weights)]
            out = norm_attention_reference(*leaves[:3], offsets, max_len, heads, *leaves[3:], scale, activation,
                                           ln_eps, rms_eps)[0]
            got = iter(torch.autograd.grad(out, [t for t in leaves if t is not None], grad_out))
            grads = [next(got) if t is not None else None for t in leaves]
    dq, dk, dv, d_ln_w, d_ln_b, d_rms_w = grads
    return dq, dk, dv, None, None, None, d_ln_w, d_ln_b, d_rms_w, None, None, None, None


norm_attention.register_autograd(_backward, setup_context=_setup_context)


def flash_norm_attention(q: Tensor, k: Tensor, v: Tensor, heads: int, ln_weight: Optional[Tensor] = None,
                         ln_bias: Optional[Tensor] = None, rms_weight: Optional[Tensor] = None,
                         scale: Optional[float] = None, activation: str = "softmax", ln_eps: float = 1e-5,
                         rms_eps: float = 1e-6, offsets: Optional[Tensor] = None,
                         max_len: Optional[int] = None) -> Tensor:
    """``norm_attention_block`` fused. Dense: q [B, Lq, H·D]. Jagged: q [T, H·D] with ``offsets`` [B+1] and
    ``max_len`` (the longest sequence; read from offsets, a device sync, when not given). k, v [B, L, H·D].
    ``scale`` defaults to 1/sqrt(head_dim) for softmax and 1/L for the others."""
    if activation not in kernels.ACTIVATIONS:
        raise ValueError(f"activation {activation!r}: expected one of {sorted(kernels.ACTIVATIONS)}")
    if scale is None:
        scale = (q.shape[-1] // heads) ** -0.5 if activation == "softmax" else 1.0 / k.shape[1]
    if offsets is None:
        if q.dim() != 3:
            raise ValueError(f"dense q must be [B, Lq, H·D], got {tuple(q.shape)}; pass offsets for jagged rows")
        B, Lq, width = q.shape
        offsets = torch.arange(0, (B + 1) * Lq, Lq, device=q.device, dtype=torch.int32)
        out = norm_attention(q.reshape(B * Lq, width), k, v, offsets, Lq, heads, ln_weight, ln_bias, rms_weight,
                             scale, activation, ln_eps, rms_eps)[0]
        return out.view(B, Lq, width)
    if max_len is None:
        max_len = int((offsets[1:] - offsets[:-1]).max())
    return norm_attention(q, k, v, offsets, max_len, heads, ln_weight, ln_bias, rms_weight, scale, activation,
                          ln_eps, rms_eps)[0]
