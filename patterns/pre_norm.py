"""A pre-norm site (RMSNorm or LayerNorm whose output feeds matmuls): offered to regrouped normalization first
(``regrouped_norm.rewrite_consumers``: the norm in the epilogues of the GEMMs around it), then, where that declines
and the older prologue families are enabled, to the norm as the consumer GEMM's k-loop prologue
(``ops.rms_norm_linear`` / ``layer_norm_linear``). The families of ``rms_norm_matmul`` and ``layer_norm_matmul``
match the norm's forms and hand each match here."""

from __future__ import annotations

from torch._inductor import pattern_matcher as pm
from torch.fx import Node

from . import regrouped_norm
from .common import (NormSpec, _eps, _implementation, _norm_rejection, _operand_rejection, _stat_readers,
                     also_read_reason, as_matmul_consumer, aten, backward_reads_normed, flattened_users, insert_fused,
                     size_hint)


def rewrite_pre_norm_site(spec: NormSpec, pattern_name: str, match: pm.Match, ctx) -> None:
    """Rewrite every matmul that reads the matched norm's output into ``spec.op``, or record why not.

    A site is rewritten only when that removes the normalized tensor from the forward pass: at inference every
    user of it must be such a matmul; in training the backward may also read it (the partitioner recomputes it
    there from x and the op's saved statistics, which its readers are redirected to)."""
    normed = match.output_node()
    x, gamma, beta = match.kwargs["x"], match.kwargs.get("weight"), match.kwargs.get("bias")
    if any(p is not None and not isinstance(p, Node) for p in (gamma, beta)):
        return  # a weighted form matched a norm times a constant: the weightless form takes this site
    eps = _eps(match)
    older = spec.fusion in ctx.config.fusions  # else only the regrouped family considers this site (passes.py)
    site = ctx.site(spec.fusion if older else "regrouped_norm", pattern_name, normed)

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
    regrouped_reason = unserved = None
    if "regrouped_norm" in ctx.config.fusions and spec.position == "pre":
        unserved = regrouped_norm.unserved_readers(normed, others)  # if any, the regrouped reason is theirs
        regrouped_reason = regrouped_norm.rewrite_consumers(spec, match, x, gamma, beta, eps, consumers, others,
                                                            site, ctx)
        if regrouped_reason is None:
            ctx.claimed.update((normed, x))  # the post-norm family leaves this norm (and its input) alone
            return
        if not older:  # the regrouped family alone decided: the record is its own
            return ctx.reject(site, regrouped_reason)
    if others:  # the prologue path cannot serve any other reader: once, naming them all, if regrouped said so too
        also_read = also_read_reason(others)
        return ctx.reject(site, also_read if regrouped_reason is None or unserved
                          else f"regrouped: {regrouped_reason}; {also_read}")
    _rewrite_prologue_site(spec, match, ctx, site, normed, x, gamma, beta, eps, consumers, x_val, M, K)
    if regrouped_reason is not None:
        site.reason = f"regrouped: {regrouped_reason}; {spec.fusion}: {site.reason}"


def _rewrite_prologue_site(spec, match, ctx, site, normed, x, gamma, beta, eps, consumers, x_val, M, K) -> None:
    """The older rewrite: the norm as the consumer GEMM's prologue (ops.rms_norm_linear / layer_norm_linear)."""
    from norm_fusion_inductor.selection import MatmulSite, choose

    backward_reads = backward_reads_normed(normed, ctx)
    choices = [choose(MatmulSite(M, K, c.n, x_val.dtype, x_val.device, gamma is not None, c.bias is not None,
                                 norm=spec.norm, has_norm_bias=beta is not None, weight_kn=c.weight_kn,
                                 backward_reads_norm=backward_reads), ctx.config) for c in consumers]
    if not all(ch.fused for ch in choices):
        why = next(ch for ch in choices if not ch.fused)
        return ctx.reject(site, why.reason, implementation=why.implementation)

    graph = normed.graph
    stat_readers = _stat_readers(match, spec.stats)
    launches = set()
    for i, (c, choice) in enumerate(zip(consumers, choices)):
        outputs, launch = insert_fused(spec, spec.args(x, gamma, beta, c, eps), choice, ctx.config, before=c.node)
        launches.add(launch)
        c.node.replace_all_uses_with(outputs[0])
        graph.erase_node(c.node)
        if i == 0:  # the backward reads the statistics: take them from the kernel, not a second reduction
            for index, readers in stat_readers.items():
                for user, old in readers:
                    user.replace_input_with(old, outputs[index])
    ctx.claimed.update((normed, x))  # the post-norm family leaves this norm (and its input) alone
    ctx.accept(site, _implementation(choices[0], launches),
               f"{len(consumers)} matmul(s) fused; " + "; ".join(sorted({ch.reason for ch in choices})))
