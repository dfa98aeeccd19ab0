"""matmul → norm (post-norm: BERT-style encoders, sublayer post-norms; design.md §1.3).

Finds RMSNorm and LayerNorm (the pre-norm families' forms) whose input is a matmul's output, optionally plus a
residual: ``norm(x Wᵀ + b + residual)``, also when the norm's only reader adds another residual to it
(``r + norm(x Wᵀ)``, sandwich-norm models), and rewrites the site as
``norm_fusion::linear_post_norm(x, W, b, residual, γ, β, eps, layer_norm, weight_kn, write_z, residual_out)``:
the norm (and the add after it) runs as the GEMM's epilogue, so the matmul's output is never written and read
back just to be normalized (``kernels/epilogue_gemm.py``, the ``POST_NORM`` piece: whole rows, N ≤ 256). When something else reads z = x Wᵀ + b + residual — the
residual stream of the next block, or the backward — the kernel also writes z.

A norm that the regrouped rewrite already fused into the matmuls after it is left alone (the pass runs it first).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch._inductor import pattern_matcher as pm
from torch.fx import Node

from norm_fusion_inductor import ops  # noqa: F401  (registers torch.ops.norm_fusion)

from .common import (VIEW_OPS, NormFamily, NormSpec, _eps, _implementation, _norm_rejection, _stat_readers, aten,
                     as_matmul_consumer, insert_call, insert_fused, size_hint)
from .norm_forms import LN_FORMS, RMS_FORMS

FUSION = "matmul_norm"
SIZE_QUERIES = (aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default)


def _producer(z: Node):
    """z as ``mm(a, W) (+ residual)``: (matmul consumer, residual or None, the nodes between the matmul and z),
    else None."""
    if z.target == aten.add.Tensor and len(z.args) == 2 and all(isinstance(a, Node) for a in z.args):
        for mm_side, residual in (z.args, z.args[::-1]):
            found = _matmul_through_view(mm_side, z)
            if found is not None and residual.meta["val"].shape == z.meta["val"].shape:
                consumer, chain = found
                return consumer, residual, chain + [z]
        return None
    found = _matmul_through_view(z, z)
    return (found[0], None, found[1]) if found is not None else None


def _matmul_through_view(node: Node, z: Node):
    """(consumer, [mm, view?]) when ``node`` is an mm/addmm output, or a view of one to z's shape."""
    chain = []
    if node.target in VIEW_OPS and isinstance(node.args[0], Node):
        chain.append(node)
        node = node.args[0]
    if node.target not in (aten.mm.default, aten.addmm.default):
        return None
    a = node.args[0] if node.target == aten.mm.default else node.args[1]
    consumer = as_matmul_consumer(node, a) if isinstance(a, Node) else None
    if consumer is None or z.meta["val"].shape[-1] != consumer.n:
        return None
    return consumer, [node] + chain[::-1]


def _residual_after(normed: Node):
    """(r, the add) when the norm's only reader is ``normed + r`` with r of the same shape and dtype, else
    (None, normed)."""
    if len(normed.users) != 1:
        return None, normed
    add = next(iter(normed.users))
    if add.target != aten.add.Tensor or len(add.args) != 2 or add.kwargs:
        return None, normed
    other = add.args[1] if add.args[0] is normed else add.args[0]
    val = normed.meta["val"]
    if (not isinstance(other, Node) or other is normed or add.meta["val"].shape != val.shape
            or other.meta["val"].shape != val.shape or add.meta["val"].dtype != val.dtype
            or other.meta["val"].dtype != val.dtype or not other.meta["val"].is_contiguous()):
        return None, normed
    return other, add


def rewrite_post_norm_site(spec: NormSpec, pattern_name: str, match: pm.Match, ctx) -> None:
    from norm_fusion_inductor.selection import PostNormSite, choose

    normed = match.output_node()
    z, gamma, beta = match.kwargs["x"], match.kwargs.get("weight"), match.kwargs.get("bias")
    if any(p is not None and not isinstance(p, Node) for p in (gamma, beta)):
        return  # a weighted form matched a norm times a constant: the weightless form takes this site
    if not isinstance(z, Node) or normed in ctx.backward or normed in ctx.claimed or z in ctx.claimed:
        return  # a backward computation that looks like a norm; a site already rewritten (matched largest first)
    found = _producer(z)
    if found is None:
        return  # not after a matmul: not this family's site
    consumer, residual, chain = found
    ctx.claimed.update((normed, z))  # decided here, rewritten or not: the smaller forms inside it are not sites
    ctx.covered.update(match.nodes)
    site = ctx.site(spec.fusion, pattern_name, normed)
    a = consumer.node.args[0] if consumer.node.target == aten.mm.default else consumer.node.args[1]
    z_val, a_val = z.meta["val"], a.meta["val"]
    N = consumer.n
    M = size_hint(z_val.numel() // N) if N else 0
    site.shape = (M, a_val.shape[-1], N)
    site.dtype = str(z_val.dtype).replace("torch.", "")

    match_nodes = set(match.nodes)
    stat_readers = _stat_readers(match, spec.stats)
    redirected = {old for readers in stat_readers.values() for _, old in readers}
    # z is needed (and written) when anything but the norm reads it, or reads a norm intermediate we do not
    # replace (the backward's x̂, for instance); size queries (dynamic shapes) do not count
    def outside(node):
        return node not in match_nodes and node.target not in SIZE_QUERIES

    write_z = any(outside(u) for u in z.users) or any(
        outside(u) for n in match.nodes if n is not normed and n not in redirected for u in n.users)
    eps = _eps(match)
    reason = _norm_rejection(match, z, gamma, beta, normed) or _post_operand_rejection(
        a_val, z_val, normed, residual, consumer, chain, eps)
    if reason is not None:
        return ctx.reject(site, reason)
    choice = choose(PostNormSite(M, a_val.shape[-1], N, z_val.dtype, z_val.device, gamma is not None,
                                 consumer.bias is not None, norm=spec.norm, has_norm_bias=beta is not None,
                                 weight_kn=consumer.weight_kn, has_residual=residual is not None,
                                 write_z=write_z, has_residual_out=_residual_after(normed)[0] is not None),
                    ctx.config)
    if not choice.fused:
        return ctx.reject(site, choice.reason, implementation=choice.implementation)

    residual_out, result = _residual_after(normed)
    args = (a, consumer.weight, consumer.bias, residual, gamma, beta, eps, spec.norm == "ln", consumer.weight_kn,
            write_z, residual_out)
    # after z and the residual added after the norm, which may come later in the graph
    outputs, launch = insert_fused(spec, args, choice, ctx.config, before=result if residual_out is not None else z)
    y, z_out, mean, rstd = outputs
    result.replace_all_uses_with(_view_like(y, result))
    for index, readers in stat_readers.items():
        stat = (None, None, mean, rstd)[index]
        for user, old in readers:
            user.replace_input_with(old, _view_like(stat, old))
    if write_z:
        z.replace_all_uses_with(_view_like(z_out, z))
    fused = "norm" + (" and the residual add after it" if residual_out is not None else "")
    ctx.accept(site, _implementation(choice, {launch}),
               f"{fused} fused into the matmul's epilogue{' (z written)' if write_z else ''}; {choice.reason}")


def _view_like(node: Node, like: Node) -> Node:
    shape = list(like.meta["val"].shape)
    if list(node.meta["val"].shape) == shape:
        return node
    return insert_call(node.graph, aten.view.default, (node, shape), before=like)


def _post_operand_rejection(a_val, z_val, normed, residual, consumer, chain, eps) -> Optional[str]:
    if z_val.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {z_val.dtype} not supported"
    if normed.meta["val"].dtype != z_val.dtype:
        return f"the norm's output dtype {normed.meta['val'].dtype} differs from its input's {z_val.dtype}"
    for node in chain[:-1]:
        others = [u for u in node.users if u not in chain]
        if others:
            return (f"the matmul's output is also used by {', '.join(sorted({str(u.target) for u in others}))} "
                    "before the norm")
    if not a_val.is_contiguous():
        return "matmul input is not contiguous"
    w = consumer.weight.meta["val"]
    if w.dtype != z_val.dtype or (consumer.bias is not None and consumer.bias.meta["val"].dtype != z_val.dtype):
        return f"matmul weight or bias dtype differs from the activation's {z_val.dtype}"
    if w.stride(-1) != 1:
        return "matmul weight rows are not contiguous"
    if residual is not None:
        r = residual.meta["val"]
        if r.dtype != z_val.dtype or not r.is_contiguous():
            return "residual is not contiguous or not in the activation's dtype"
    return None


SPECS = {
    norm: NormSpec(FUSION, norm, stats, position="post", op=torch.ops.norm_fusion.linear_post_norm.default,
                   op_tensor_eps=torch.ops.norm_fusion.linear_post_norm_tensor_eps.default, eps_arg=6)
    for norm, stats in (("rms", {aten.rsqrt.default: 3}), ("ln", {("var_mean", 1): 2, aten.rsqrt.default: 3}))
}
FAMILIES = [
    NormFamily(SPECS["rms"], {f"rms/{k}": v for k, v in RMS_FORMS.items()}, rewrite_post_norm_site),
    NormFamily(SPECS["ln"], {f"ln/{k}": v for k, v in LN_FORMS.items()}, rewrite_post_norm_site),
]


def apply(graph, ctx) -> None:
    for family in FAMILIES:
        family.apply(graph, ctx)
