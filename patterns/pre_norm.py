"""Pre-norm sites: RMSNorm or LayerNorm (in the forms model code writes them, ``norm_forms``) whose output feeds
matmuls. Each match is handed to regrouped normalization (``regrouped_norm.rewrite_consumers``: the norm in the
epilogues of the GEMMs that read it, γ folded into their weights); ``regrouped_norm.apply`` then links the GEMM
that produced the norm's input. These matchers are the first step of the fusion "regrouped_norm"."""

from __future__ import annotations

from torch._inductor import pattern_matcher as pm
from torch.fx import Node

from . import regrouped_norm
from .common import (NormFamily, NormSpec, _eps, _norm_rejection, _operand_rejection, as_matmul_consumer, aten,
                     flattened_users, size_hint)
from .norm_forms import LN_FORMS, RMS_FORMS

FUSION = regrouped_norm.FUSION


def rewrite_pre_norm_site(spec: NormSpec, pattern_name: str, match: pm.Match, ctx) -> None:
    """Offer the matched norm to the regrouped rewrite, or record why its site stays unfused.

    A site is rewritten only when that removes the normalized tensor from the forward pass: at inference every
    user of it must be a matmul the rewrite serves; in training the backward may also read it."""
    normed = match.output_node()
    x, gamma, beta = match.kwargs["x"], match.kwargs.get("weight"), match.kwargs.get("bias")
    if any(p is not None and not isinstance(p, Node) for p in (gamma, beta)):
        return  # a weighted form matched a norm times a constant: the weightless form takes this site
    eps = _eps(match)
    site = ctx.site(FUSION, pattern_name, normed)

    reason = _norm_rejection(match, x, gamma, beta, normed)
    consumers, others, other_matmuls = [], [], []
    for user, operand, scale in flattened_users(normed):
        consumer = as_matmul_consumer(user, operand)
        if consumer is not None:
            consumer.scale = scale
            consumers.append(consumer)
        elif user not in ctx.backward:
            others.append(user)
            if user.target in (aten.mm.default, aten.addmm.default):
                other_matmuls.append(user)
    if not consumers and not other_matmuls:
        return  # a norm with no matmul next to it is not this family's site
    ctx.covered.update(match.nodes)
    x_val = x.meta["val"]
    K = x_val.shape[-1]
    M = size_hint(x_val.numel() // K) if K else 0
    site.shape = (M, K, (consumers[0].node if consumers else other_matmuls[0]).meta["val"].shape[-1])
    site.dtype = str(x_val.dtype).replace("torch.", "")
    if reason is None and other_matmuls:
        reason = "a matmul reads the normalized tensor with a weight that is neither [N, K] transposed nor [K, N]"
    reason = reason or _operand_rejection(x_val, consumers)
    if reason is not None:
        return ctx.reject(site, reason)
    reason = regrouped_norm.rewrite_consumers(spec, match, x, gamma, beta, eps, consumers, others, site, ctx)
    if reason is not None:
        return ctx.reject(site, reason)
    ctx.claimed.update((normed, x))  # the post-norm family leaves this norm (and its input) alone


SPECS = {"rms": NormSpec(FUSION, "rms", stats={}), "ln": NormSpec(FUSION, "ln", stats={})}
FAMILIES = [NormFamily(SPECS["rms"], RMS_FORMS, rewrite_pre_norm_site),
            NormFamily(SPECS["ln"], LN_FORMS, rewrite_pre_norm_site)]


def apply(graph, ctx) -> None:
    for family in FAMILIES:
        family.apply(graph, ctx)
