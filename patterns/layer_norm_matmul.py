"""LayerNorm → matmul (pre-LN models: GPT-2 style decoders, vision transformers; design.md §1.2).

Finds LayerNorm (``F.layer_norm`` / ``nn.LayerNorm``, affine on or off, bias on or off, any eps; and written out as
mean, then the variance of the centred values, as Cohere's) and rewrites
every matmul that reads its output as ``norm_fusion::layer_norm_linear(x, γ, β, W, b, eps)``:
``rstd · ((x − μ)·γ) Wᵀ + (W β + b)`` in one kernel, the mean entering through the column sums of W·γ, so the
normalized tensor is never written. The site checks and the rewrite are shared (``pre_norm.rewrite_pre_norm_site``).
"""

from __future__ import annotations

import torch

from norm_fusion_inductor import ops  # noqa: F401  (registers torch.ops.norm_fusion)

from .common import NormFamily, NormSpec, aten
from .norm_forms import LN_FORMS
from .pre_norm import rewrite_pre_norm_site

FUSION = "layer_norm_matmul"

SPEC = NormSpec(FUSION, "ln", torch.ops.norm_fusion.layer_norm_linear.default,
                torch.ops.norm_fusion.layer_norm_linear_tensor_eps.default,
                stats={("var_mean", 1): 1, "mean": 1, aten.rsqrt.default: 2})
FAMILY = NormFamily(SPEC, LN_FORMS, rewrite_pre_norm_site)
apply = FAMILY.apply
