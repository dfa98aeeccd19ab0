"""RMSNorm → matmul ("Lazy Pre-Norm", design.md §1.1).

Finds RMSNorm in the forms model code writes it and rewrites every matmul that reads the normalized tensor as
``norm_fusion::rms_norm_linear(x, γ, W, b, eps)``, which computes ``rstd · ((x·γ) Wᵀ) + b`` in one kernel and
never writes the normalized tensor. The site checks and the rewrite are shared with the other norm families
(``common.rewrite_norm_site``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from norm_fusion_inductor import ops  # noqa: F401  (registers torch.ops.norm_fusion)

from .common import NormFamily, NormSpec, aten

FUSION = "rms_norm_matmul"


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


def torch_rms_norm(x, weight, eps):
    """F.rms_norm / nn.RMSNorm."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def torch_rms_norm_no_weight(x, eps):
    return F.rms_norm(x, (x.shape[-1],), None, eps)


# name: (search function, dtype of each parameter after x in the trace: "input" = the input's, or a dtype)
FORMS = {
    "hf_llama": (hf_llama, ("input",)),
    "hf_llama_no_weight": (hf_llama_no_weight, ()),
    "t5": (t5, ("input",)),
    "gemma": (gemma, (torch.float32,)),
    "olmo2": (olmo2, ("input",)),
    "torch_rms_norm": (torch_rms_norm, ("input",)),
    "torch_rms_norm_no_weight": (torch_rms_norm_no_weight, ()),
}



SPEC = NormSpec(FUSION, "rms", torch.ops.norm_fusion.rms_norm_linear.default,
                torch.ops.norm_fusion.rms_norm_linear_tensor_eps.default, stats={aten.rsqrt.default: 1})
FAMILY = NormFamily(SPEC, FORMS)
apply = FAMILY.apply
