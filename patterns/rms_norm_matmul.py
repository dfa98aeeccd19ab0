"""RMSNorm → matmul ("Lazy Pre-Norm", design.md §1.1).

Finds RMSNorm in the forms model code writes it and rewrites every matmul that reads the normalized tensor as
``norm_fusion::rms_norm_linear(x, γ, W, b, eps)``, which computes ``rstd · ((x·γ) Wᵀ) + b`` in one kernel and
never writes the normalized tensor. The site checks and the rewrite are shared with the other norm families
(``pre_norm.rewrite_pre_norm_site``); the forms are in ``norm_forms``.
"""

from __future__ import annotations

import torch

from norm_fusion_inductor import ops  # noqa: F401  (registers torch.ops.norm_fusion)

from .common import NormFamily, NormSpec, aten
from .norm_forms import RMS_FORMS
from .pre_norm import rewrite_pre_norm_site

FUSION = "rms_norm_matmul"

SPEC = NormSpec(FUSION, "rms", torch.ops.norm_fusion.rms_norm_linear.default,
                torch.ops.norm_fusion.rms_norm_linear_tensor_eps.default, stats={aten.rsqrt.default: 1})
FAMILY = NormFamily(SPEC, RMS_FORMS, rewrite_pre_norm_site)
apply = FAMILY.apply
