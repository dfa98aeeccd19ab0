"""Shared test helpers: model code written as libraries write it, and float64 references."""

import dataclasses
import os

import pytest
import torch
import torch.nn as nn

from norm_fusion_inductor import config

# the Triton kernels run on CPU tensors: only under the interpreter (no GPU, TRITON_INTERPRET=1)
interpreter = pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="CPU interpreter tests")

# Every family but regrouped normalization: "regrouped_norm" is on by default and takes every pre-norm site first,
# so a test whose subject is the post-norm (matmul_norm) or norm_attention selects these, and its sites stay theirs.
OLDER_FUSIONS = tuple(f for f in config.KNOWN_FUSIONS if f != "regrouped_norm")


def poison_allocator(nbytes=1 << 28):
    """Fill memory the caching allocator will hand out next with NaN, so unwritten outputs cannot pass (CUDA)."""
    junk = torch.full((nbytes // 4,), float("nan"), device="cuda")
    del junk


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


class LlamaRMSNorm(nn.Module):
    """transformers' LlamaRMSNorm, verbatim in structure (weight=False: the same without the weight)."""

    def __init__(self, hidden, eps=1e-6, weight=True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden)) if weight else None
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight is None:
            return hidden_states.to(input_dtype)
        return self.weight * hidden_states.to(input_dtype)


class T5LayerNorm(nn.Module):
    """transformers' T5LayerNorm."""

    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class GemmaRMSNorm(nn.Module):
    """transformers' GemmaRMSNorm: the weight is stored as γ − 1 and applied in fp32."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


def linear_post_norm_reference64(x, w, bias, residual, gamma, beta, eps, layer_norm, residual_out=None):
    """y, z, mean, rstd of norm(x wᵀ + b + residual; γ, β) (+ residual_out), in float64 (mean None for
    RMSNorm)."""
    z = x.double() @ w.double().t()
    for t in (bias, residual):
        if t is not None:
            z = z + t.double()
    if layer_norm:
        var, mean = torch.var_mean(z, -1, correction=0, keepdim=True)
        rstd = torch.rsqrt(var + eps)
        y = (z - mean) * rstd
    else:
        mean, rstd = None, torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps)
        y = z * rstd
    if gamma is not None:
        y = y * gamma.double()
    if beta is not None:
        y = y + beta.double()
    if residual_out is not None:
        y = y + residual_out.double()
    return y, z, mean, rstd


def linear_post_norm_unfused(x, w, bias, residual, gamma, beta, eps, layer_norm):
    """The unfused path as Inductor computes it: z rounded to x's dtype, then the norm in fp32."""
    import torch.nn.functional as F

    z = F.linear(x, w, bias)
    if residual is not None:
        z = z + residual
    f = (lambda t: None if t is None else t.float())
    if layer_norm:
        return F.layer_norm(z.float(), (z.shape[-1],), f(gamma), f(beta), eps)
    return F.rms_norm(z.float(), (z.shape[-1],), f(gamma), eps)


def norm_attention_case(lens, heads, head_dim, kv_len, activation, dtype, device="cpu", affine=True, seed=0,
                        mean_shift=0.5):
    """Operands of the norm → attention → norm op: jagged rows of sequences of ``lens``, k/v [B, L, H·D], norm
    weights (or None), the default scale, and an upstream gradient."""
    g = torch.Generator(device=device).manual_seed(seed)
    width = heads * head_dim
    offsets = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=device)

    def rand(*shape, std=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, device=device) * std + shift).to(dtype)

    q = rand(sum(lens), width, std=2.0, shift=mean_shift)
    k, v = rand(len(lens), kv_len, width), rand(len(lens), kv_len, width)
    norm_w = [rand(width, std=0.3, shift=1.0), rand(width, std=0.2), rand(width, std=0.3, shift=1.0)]
    scale = head_dim ** -0.5 if activation == "softmax" else 1.0 / kv_len
    args = dict(q=q, k=k, v=v, offsets=offsets, max_len=max(lens), heads=heads,
                ln_weight=norm_w[0] if affine else None, ln_bias=norm_w[1] if affine else None,
                rms_weight=norm_w[2] if affine else None, scale=scale, activation=activation,
                ln_eps=1e-5, rms_eps=1e-6)
    return args, rand(sum(lens), width)


NORM_ATTENTION_DIFFERENTIABLE = ("q", "k", "v", "ln_weight", "ln_bias", "rms_weight")


def norm_attention_run(fn, args, grad_out, cast=None, frozen=()):
    """(out, stats, grads) of ``fn(**args)`` (the op or the reference), inputs cast by ``cast`` (a dtype) first;
    grads of the differentiable inputs that are not None and not named in ``frozen`` (those need no gradient),
    in NORM_ATTENTION_DIFFERENTIABLE order."""
    args = dict(args)
    for name in NORM_ATTENTION_DIFFERENTIABLE:
        if args[name] is not None:
            args[name] = args[name].detach().to(cast or args[name].dtype).requires_grad_(name not in frozen)
    outs = fn(**args)
    leaves = [args[n] for n in NORM_ATTENTION_DIFFERENTIABLE if args[n] is not None and n not in frozen]
    grads = torch.autograd.grad(outs[0], leaves, grad_out.to(outs[0].dtype))
    return outs[0], outs[1:], grads


def interpret_kernels(monkeypatch) -> None:
    """The ops run their Triton kernels on CPU tensors (under TRITON_INTERPRET) until the test ends."""
    from norm_fusion_inductor.kernels import tuning

    monkeypatch.setattr(tuning, "_current", dataclasses.replace(tuning.current(), interpret_on_cpu=True))


def record_kernel_calls(monkeypatch, kernels_module) -> list:
    """Under the interpreter (``interpret_kernels``), with the module's ``forward``/``backward`` wrapped to
    append their names to the returned list when called."""
    interpret_kernels(monkeypatch)
    calls = []
    for name in ("forward", "backward"):
        real = getattr(kernels_module, name)
        monkeypatch.setattr(kernels_module, name, lambda *a, _real=real, _name=name, **k: calls.append(_name)
                            or _real(*a, **k))
    return calls
