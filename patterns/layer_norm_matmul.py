"""LayerNorm → matmul (pre-LN models: GPT-2 style decoders, vision transformers; design.md §1.2).

Finds LayerNorm (``F.layer_norm`` / ``nn.LayerNorm``, affine on or off, bias on or off, any eps; and written out as
mean, then the variance of the centred values, as Cohere's) and rewrites
every matmul that reads its output as ``norm_fusion::layer_norm_linear(x, γ, β, W, b, eps)``:
``rstd · ((x − μ)·γ) Wᵀ + (W β + b)`` in one kernel, the mean entering through the column sums of W·γ, so the
normalized tensor is never written. The site checks and the rewrite are shared (``common.rewrite_norm_site``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from norm_fusion_inductor import ops  # noqa: F401  (registers torch.ops.norm_fusion)

from .common import NormFamily, NormSpec, aten

FUSION = "layer_norm_matmul"


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


FORMS = {
    "layer_norm": (affine, ("input", "input")),
    "layer_norm_no_bias": (weight_only, ("input",)),
    "layer_norm_no_affine": (no_affine, ()),
    "two_pass": (two_pass, ("input",)),
}

SPEC = NormSpec(FUSION, "ln", torch.ops.norm_fusion.layer_norm_linear.default,
                torch.ops.norm_fusion.layer_norm_linear_tensor_eps.default,
                stats={("var_mean", 1): 1, "mean": 1, aten.rsqrt.default: 2})
FAMILY = NormFamily(SPEC, FORMS)
apply = FAMILY.apply
