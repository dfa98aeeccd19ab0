"""Custom ops the patterns rewrite into. Each has a fake implementation (shapes only, for tracing), an autograd
formula, a reference implementation in plain torch ops (CPU, unsupported layouts), and a Triton kernel on CUDA.

``torch.ops.norm_fusion.rms_norm_linear(x, norm_weight, weight, bias, eps) -> (out, rstd)``
    out = (rmsnorm(x) · norm_weight) @ weightᵀ + bias, flattened to [M, N] with M = x.numel() / K;
    rstd = rsqrt(mean(x², -1) + eps) in fp32, shaped x.shape[:-1] + (1,), saved for backward.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Optional

import torch
from torch import Tensor

from .kernels import prenorm_matmul
from .report import log


def _kernel_unsupported_reason(x2d: Tensor, weight: Tensor) -> Optional[str]:
    """None when the Triton kernel runs these operands. On CPU only under the Triton interpreter, and only when
    NORM_FUSION_INTERPRET=1 (tests), since the interpreter is far slower than the reference."""
    if x2d.device.type == "cpu" and os.environ.get("NORM_FUSION_INTERPRET", "0") != "1":
        return "CPU: reference implementation"
    return prenorm_matmul.supports(x2d, weight)


def rms_norm_linear_reference(x: Tensor, norm_weight: Optional[Tensor], weight: Tensor, bias: Optional[Tensor],
                              eps: float) -> tuple[Tensor, Tensor]:
    """The unfused computation in torch ops, with the fused kernel's rounding: (x·γ) in x's dtype, fp32 stats."""
    K = x.shape[-1]
    acc = _stats_dtype(x)
    xf = x.reshape(-1, K).to(acc)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    a = xf * norm_weight.to(acc) if norm_weight is not None else xf
    out = torch.mm(a.to(x.dtype), weight.t()).to(acc) * rstd
    if bias is not None:
        out = out + bias.to(acc)
    return out.to(x.dtype), rstd.float()


def _stats_dtype(x: Tensor) -> torch.dtype:
    """fp32 statistics for 16-bit and fp32 inputs; fp64 stays fp64 (gradcheck)."""
    return torch.promote_types(x.dtype, torch.float32)


def _rms_norm_linear(x: Tensor, norm_weight: Optional[Tensor], weight: Tensor, bias: Optional[Tensor],
                     eps: float) -> tuple[Tensor, Tensor]:
    K = x.shape[-1]
    x2d = x.reshape(-1, K)
    reason = _kernel_unsupported_reason(x2d, weight)
    if reason is None:
        out, rstd = prenorm_matmul.rms_norm_matmul(x2d, norm_weight, weight, bias, eps)
    else:
        if x.is_cuda:
            _warn_once(reason)
        out, rstd = rms_norm_linear_reference(x2d, norm_weight, weight, bias, eps)
    return out, rstd.reshape(*x.shape[:-1], 1)


@torch.library.custom_op("norm_fusion::rms_norm_linear", mutates_args=())
def rms_norm_linear(x: Tensor, norm_weight: Optional[Tensor], weight: Tensor, bias: Optional[Tensor],
                    eps: float) -> tuple[Tensor, Tensor]:
    return _rms_norm_linear(x, norm_weight, weight, bias, eps)


@torch.library.custom_op("norm_fusion::rms_norm_linear_tensor_eps", mutates_args=())
def rms_norm_linear_tensor_eps(x: Tensor, norm_weight: Optional[Tensor], weight: Tensor, bias: Optional[Tensor],
                               eps: Tensor) -> tuple[Tensor, Tensor]:
    """The same with eps as a 0-d tensor: torch.compile(dynamic=True) turns a model's float eps into a graph
    input of that kind (a CPU scalar, so reading it costs no device sync)."""
    return _rms_norm_linear(x, norm_weight, weight, bias, eps.item())


@functools.lru_cache(maxsize=None)
def _warn_once(reason: str) -> None:
    """A rewritten site whose operands the kernel cannot take at run time (the pass checks what it can see)."""
    log.warning("rms_norm_linear runs the slow reference implementation on CUDA: %s", reason)


@rms_norm_linear.register_fake
@rms_norm_linear_tensor_eps.register_fake
def _(x, norm_weight, weight, bias, eps):
    M = math.prod(x.shape[:-1])
    out = x.new_empty(M, weight.shape[0])
    rstd = x.new_empty(*x.shape[:-1], 1, dtype=torch.float32)
    return out, rstd


def _setup_context(ctx, inputs, output):
    x, norm_weight, weight, bias, eps = inputs
    _, rstd = output
    ctx.save_for_backward(x, norm_weight, weight, rstd)
    ctx.has_bias = bias is not None
    ctx.mark_non_differentiable(rstd)


def _backward(ctx, grad_out, _grad_rstd):
    """Unfused backward from x and the saved rstd (the normalized tensor is recomputed, never stored).

    x̂ = x·rstd, n = x̂·γ; dW = dYᵀ n, dn = dY W, dγ = Σ_rows dn·x̂, g = dn·γ,
    dx = rstd · (g − x̂ · mean(g·x̂, -1))."""
    x, norm_weight, weight, rstd = ctx.saved_tensors
    K = x.shape[-1]
    acc = _stats_dtype(x)
    x2d = x.reshape(-1, K).to(acc)
    rstd2d = rstd.reshape(-1, 1).to(acc)
    x_hat = x2d * rstd2d
    normed = x_hat * norm_weight.to(acc) if norm_weight is not None else x_hat
    grad_out = grad_out.reshape(-1, weight.shape[0])
    grad_normed = torch.mm(grad_out, weight).to(acc)
    grad_weight = torch.mm(grad_out.t(), normed.to(x.dtype)) if ctx.needs_input_grad[2] else None
    grad_bias = grad_out.to(acc).sum(0).to(weight.dtype) if ctx.has_bias and ctx.needs_input_grad[3] else None
    grad_norm_weight = None
    if norm_weight is not None:
        if ctx.needs_input_grad[1]:
            grad_norm_weight = (grad_normed * x_hat).sum(0).to(norm_weight.dtype)
        grad_normed = grad_normed * norm_weight.to(acc)
    grad_x = None
    if ctx.needs_input_grad[0]:
        grad_x = rstd2d * (grad_normed - x_hat * (grad_normed * x_hat).mean(-1, keepdim=True))
        grad_x = grad_x.to(x.dtype).reshape(x.shape)
    return grad_x, grad_norm_weight, grad_weight, grad_bias, None


rms_norm_linear.register_autograd(_backward, setup_context=_setup_context)
rms_norm_linear_tensor_eps.register_autograd(_backward, setup_context=_setup_context)
