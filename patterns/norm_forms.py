"""The forms in which model code writes RMSNorm and LayerNorm, and the activations after a consumer matmul: eager
functions that the pattern families trace into patterns (``tracing.traced_norm_forms``,
``regrouped_norm.activation_patterns``). Shared by the pre-norm families, the post-norm family and the per-head
QK-norm search, so each form is written once. The traces shipped in ``traced/`` depend on this module and
``tracing.py`` (``tracing.TRACED_SOURCES``): after a change to either, ``python -m norm_fusion_inductor
trace-patterns`` with each shipped torch."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# --- the forms of RMSNorm (eager code, traced into patterns) ----------------------------------------------------

def hf_llama(x, weight, eps):
    """transformers' LlamaRMSNorm (also Mistral, Qwen2, Gemma-style without the +1): upcast, then weight after
    the downcast."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def hf_llama_no_weight(x, eps):
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return h.to(dtype)


def t5(x, weight, eps):
    """transformers' T5LayerNorm: statistics in fp32, the 16-bit input scaled directly."""
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    h = x * torch.rsqrt(variance + eps)
    return weight * h.to(weight.dtype)


def gemma(x, weight, eps):
    """transformers' GemmaRMSNorm: weight (there 1 + w, computed in the graph) applied in fp32, then the
    downcast. Also any RMSNorm written ``(h * weight).type_as(x)``."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * weight).type_as(x)


def olmo2(x, weight, eps):
    """transformers' Olmo2RMSNorm: the weight applied before the downcast, in the input's dtype (so the product
    is in fp32 for 16-bit models)."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * h).to(dtype)


def gemma4(x, weight, eps):
    """transformers' Gemma4RMSNorm: ``torch.pow(mean + eps, -0.5)`` for the rsqrt, the weight upcast and applied
    in fp32, then the downcast."""
    h = x.float()
    h = h * torch.pow(h.pow(2).mean(-1, keepdim=True) + eps, -0.5)
    return (h * weight.float()).type_as(x)


def gemma4_no_weight(x, eps):
    """Gemma4RMSNorm(with_scale=False) (Gemma 4's value norm)."""
    h = x.float()
    return (h * torch.pow(h.pow(2).mean(-1, keepdim=True) + eps, -0.5)).type_as(x)


def torch_rms_norm(x, weight, eps):
    """F.rms_norm / nn.RMSNorm."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def torch_rms_norm_no_weight(x, eps):
    return F.rms_norm(x, (x.shape[-1],), None, eps)


# name: (search function, dtype of each parameter after x in the trace: "input" = the input's, or a dtype)
RMS_FORMS = {
    "hf_llama": (hf_llama, ("input",)),
    "hf_llama_no_weight": (hf_llama_no_weight, ()),
    "t5": (t5, ("input",)),
    "gemma": (gemma, (torch.float32,)),
    "olmo2": (olmo2, ("input",)),
    "gemma4": (gemma4, ("input",)),
    "gemma4_no_weight": (gemma4_no_weight, ()),
    "torch_rms_norm": (torch_rms_norm, ("input",)),
    "torch_rms_norm_no_weight": (torch_rms_norm_no_weight, ()),
}


# --- the forms of LayerNorm -----------------------------------------------------------------------------------

def affine(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def weight_only(x, weight, eps):
    """nn.LayerNorm(bias=False)."""
    return F.layer_norm(x, (x.shape[-1],), weight, None, eps)


def no_affine(x, eps):
    return F.layer_norm(x, (x.shape[-1],), None, None, eps)


def two_pass(x, weight, eps):
    """transformers' CohereLayerNorm (Command-R): the mean, then the variance of the centred values, in fp32;
    the weight (no bias) applied in fp32 before the downcast."""
    dtype = x.dtype
    h = x.to(torch.float32)
    mean = h.mean(-1, keepdim=True)
    variance = (h - mean).pow(2).mean(-1, keepdim=True)
    h = (h - mean) * torch.rsqrt(variance + eps)
    return (weight.to(torch.float32) * h).to(dtype)


LN_FORMS = {
    "layer_norm": (affine, ("input", "input")),
    "layer_norm_no_bias": (weight_only, ("input",)),
    "layer_norm_no_affine": (no_affine, ()),
    "two_pass": (two_pass, ("input",)),
}


# --- activations after a consumer matmul, as Inductor decomposes them --------------------------------------------

def _gelu(z):
    return F.gelu(z)


def _gelu_tanh(z):
    return F.gelu(z, approximate="tanh")


def _gelu_new(z):
    """transformers' NewGELUActivation (GPT-2, GPT-J, CodeGen): the tanh approximation written out."""
    return 0.5 * z * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * torch.pow(z, 3.0))))


def _gelu_fast(z):
    """transformers' FastGELUActivation: the same approximation, its constant rounded to 10 digits."""
    return 0.5 * z * (1.0 + torch.tanh(z * 0.7978845608 * (1.0 + 0.044715 * z * z)))


def _silu(z):
    return F.silu(z)


def _relu(z):
    return F.relu(z)


def _relu2(z):
    return F.relu(z) ** 2


# (epilogue activation, a form model code writes it in)
ACTIVATION_FORMS = (("gelu", _gelu), ("gelu_tanh", _gelu_tanh), ("gelu_tanh", _gelu_new), ("gelu_tanh", _gelu_fast),
                    ("silu", _silu), ("relu", _relu), ("relu2", _relu2))
GATED_FORMS = (
    ("silu_mul", lambda gate, up: F.silu(gate) * up),
    ("gelu_mul", lambda gate, up: F.gelu(gate) * up),
    ("gelu_tanh_mul", lambda gate, up: F.gelu(gate, approximate="tanh") * up),
)
