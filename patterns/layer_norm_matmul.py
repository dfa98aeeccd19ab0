"""LayerNorm → matmul (pre-LN models: GPT-2 style decoders, vision transformers; design.md §1.2).

Finds LayerNorm (``F.layer_norm`` / ``nn.LayerNorm``, affine on or off, bias on or off, any eps) and rewrites
every matmul that reads its output as ``norm_fusion::layer_norm_linear(x, γ, β, W, b, eps)``:
``rstd · ((x − μ)·γ) Wᵀ + (W β + b)`` in one kernel, the mean entering through the column sums of W·γ, so the
normalized tensor is never written. The site checks and the rewrite are shared (``common.rewrite_norm_site``).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch._inductor import pattern_matcher as pm
from torch.fx import Graph

from norm_fusion_inductor import ops  # noqa: F401  (registers torch.ops.norm_fusion)

from .common import NormSpec, aten, build_pattern_pass, rewrite_norm_site

FUSION = "layer_norm_matmul"


def affine(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def weight_only(x, weight, eps):
    """nn.LayerNorm(bias=False)."""
    return F.layer_norm(x, (x.shape[-1],), weight, None, eps)


def no_affine(x, eps):
    return F.layer_norm(x, (x.shape[-1],), None, None, eps)


FORMS = {
    "layer_norm": (affine, ("input", "input")),
    "layer_norm_no_bias": (weight_only, ("input",)),
    "layer_norm_no_affine": (no_affine, ()),
}

SPEC = NormSpec(FUSION, "ln", torch.ops.norm_fusion.layer_norm_linear.default,
                torch.ops.norm_fusion.layer_norm_linear_tensor_eps.default,
                stats={("var_mean", 1): 1, aten.rsqrt.default: 2})


@functools.lru_cache(maxsize=None)
def pattern_pass() -> pm.PatternMatcherPass:
    return build_pattern_pass(FUSION, FORMS, _rewrite_site)


def apply(graph: Graph, ctx) -> None:
    """Run the family over ``graph``; ``ctx`` (passes.PassContext) carries the config and records sites."""
    pattern_pass().apply(graph)


def _rewrite_site(pattern_name: str, match: pm.Match, *args, **kwargs) -> None:
    from norm_fusion_inductor.passes import current_context

    rewrite_norm_site(SPEC, pattern_name, match, current_context())
