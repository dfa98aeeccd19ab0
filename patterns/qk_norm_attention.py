"""Per-head RMSNorm of q and k (QK-norm), the rotary embedding after it, and scaled-dot-product attention,
rewritten into ``norm_fusion::qk_norm_attention``.

Matched in the torch-level graph before autograd (the pre-grad stage), like norm → attention → norm, so that
training runs the op's own backward kernels. The forms, as HF model code writes them (Qwen3, Gemma-3-like
decoders with a plain RMSNorm):

    q = q_norm(q_proj(h).view(B, L, -1, D)).transpose(1, 2)      HF's RMSNorm (x.to(fp32) · rsqrt(mean(x²) + eps),
    k = k_norm(k_proj(h).view(B, L, -1, D)).transpose(1, 2)      cast back, · w) or F.rms_norm with a weight;
                                                                  the transpose before or after the norm
    q = q·cos + rotate_half(q)·sin;  k alike                     optional; cos, sin [B|1, L, D].unsqueeze(1)
    a = F.scaled_dot_product_attention(q, k, v, scale=s, is_causal=c, enable_gqa=g)   no mask, no dropout

The anchor is the SDPA call. k and v may arrive through HF's KV-cache concatenation with an empty tensor
(cat([empty, k], dim=-2)): the op reads the tensors before it, and the concatenation stays for the cache's other
readers. The normalized, rotated k may have readers outside the site (the cache): they get the op's k̂. Every
other intermediate must have no reader outside the site.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Optional

import torch
from torch.fx import Graph, Node

from norm_fusion_inductor import qk_norm_ops, selection  # noqa: F401  (registers the op)

from .torch_level import (ADD, MUL, RMS_NORM, SDPA, Reject, arg, erase_replaced, is_call, shape, swaps_dims_1_2,
                          value)

FUSION = "qk_norm_attention"

_CASTS = ("to", "float", "type", "type_as")


class NotASite(Reject):
    """The attention's q is not a per-head norm's output: a plain attention, not this family's site."""
_PARAMETER_OPS = ("placeholder", "get_attr")


@dataclasses.dataclass
class Side:
    """One of q and k: its raw [B, L, H, D] or [B, H, L, D] tensor, its norm's weight and eps, its rotary
    tables, and the nodes the op replaces."""
    raw: Node
    raw_is_bhld: bool  # False: the raw tensor is [B, L, H, D] and the op gets its transpose
    weight: Node
    eps: float
    cos: Optional[Node]
    sin: Optional[Node]
    internal: list


def _strip_casts(node, internal: list):
    while is_call(node, (), _CASTS) or is_call(node, (torch.Tensor.to,)):
        internal.append(node)
        node = node.args[0]
    return node


def _is_weight(node) -> bool:
    """A 1-D parameter or graph input (the norm's weight)."""
    return isinstance(node, Node) and node.op in _PARAMETER_OPS and value(node) is not None and value(node).dim() == 1


def _rms_norm(node: Node, internal: list) -> tuple[Node, Node, float]:
    """(x, weight, eps) of an RMSNorm over the last dimension that produces ``node``."""
    if is_call(node, RMS_NORM):
        weight, eps = arg(node, 2, "weight"), arg(node, 3, "eps")
        if weight is None:
            raise Reject("an RMSNorm without a weight")
        internal.append(node)
        x = node.args[0]
        return x, weight, float(eps if eps is not None else torch.finfo(value(x).dtype).eps)
    if not (is_call(node, MUL, ("mul",)) and len(node.args) == 2):
        raise NotASite("the per-head tensor is not an RMSNorm's output")
    weight, y = node.args
    if not _is_weight(weight):
        y, weight = weight, y
    if not _is_weight(weight):
        raise NotASite("no weight · normalized x")
    internal.append(node)
    scaled = _strip_casts(y, internal)
    if not (is_call(scaled, MUL, ("mul",)) and len(scaled.args) == 2):
        raise NotASite("not w · (x · rsqrt(mean(x²) + eps))")
    h, rsqrt = scaled.args
    if not is_call(rsqrt, (torch.rsqrt,), ("rsqrt",)):
        h, rsqrt = rsqrt, h
    if not is_call(rsqrt, (torch.rsqrt,), ("rsqrt",)):
        raise Reject("not x · rsqrt(mean(x²) + eps)")
    added = rsqrt.args[0]
    if not (is_call(added, ADD, ("add",)) and len(added.args) == 2):
        raise Reject("not rsqrt(mean(x²) + eps)")
    mean, eps = added.args
    if not isinstance(eps, (int, float)):
        mean, eps = eps, mean
    if not isinstance(eps, (int, float)) or not is_call(mean, (torch.mean,), ("mean",)):
        raise Reject("not rsqrt(mean(x²) + eps) with a constant eps")
    dims = arg(mean, 1, "dim")
    if dims not in (-1, (-1,), [-1], value(h).dim() - 1) or not arg(mean, 2, "keepdim", False):
        raise Reject("the mean is not over the last dimension (keepdim)")
    power = mean.args[0]
    if not (is_call(power, (torch.pow, operator.pow), ("pow",)) and power.args[1] == 2 and power.args[0] is h):
        raise Reject("not mean(x²) of the same x")
    internal += [scaled, rsqrt, added, mean, power]
    x = _strip_casts(h, internal)
    out_dtype, x_dtype = value(node).dtype, value(x).dtype
    if out_dtype != x_dtype or value(weight).dtype != x_dtype:
        raise Reject(f"the norm's output ({out_dtype}) or weight ({value(weight).dtype}) is not in the input's "
                     f"dtype ({x_dtype})")
    return x, weight, float(eps)


def _unsqueezed_1(node) -> Optional[Node]:
    """t when node is t.unsqueeze(1) of a [B|1, L, D] table."""
    if is_call(node, (torch.unsqueeze,), ("unsqueeze",)) and arg(node, 1, "dim") == 1:
        return node.args[0]
    return None


def _half(node, source: Node, first: bool, half: int) -> bool:
    """node is source[..., :half] (first) or source[..., half:]."""
    if not (is_call(node, (operator.getitem,)) and node.args[0] is source):
        return False
    index = node.args[1]
    if not (isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis and isinstance(index[1], slice)):
        return False
    s = index[1]
    wanted = (None, half) if first else (half, None)
    return (s.start, s.stop) == wanted and s.step in (None, 1)


def _rope(node: Node, internal: list) -> tuple[Node, Optional[Node], Optional[Node]]:
    """(t, cos, sin) when node = t·cos.unsqueeze(1) + rotate_half(t)·sin.unsqueeze(1), else (node, None, None)."""
    if not (is_call(node, ADD, ("add",)) and len(node.args) == 2):
        return node, None, None
    for plain, rotated in (node.args, node.args[::-1]):
        if not (is_call(plain, MUL, ("mul",)) and is_call(rotated, MUL, ("mul",))):
            continue
        for t, cos_u in (plain.args, plain.args[::-1]):
            for cat, sin_u in (rotated.args, rotated.args[::-1]):
                cos, sin = _unsqueezed_1(cos_u), _unsqueezed_1(sin_u)
                if cos is None or sin is None or not isinstance(t, Node) or not is_call(cat, (torch.cat,)):
                    continue
                parts, dim = cat.args[0], arg(cat, 1, "dim", 0)
                if len(parts) != 2 or dim not in (-1, 3) or not is_call(parts[0], (operator.neg,), ("neg",)):
                    continue
                half = shape(t)[-1] // 2
                if _half(parts[0].args[0], t, False, half) and _half(parts[1], t, True, half):
                    internal += [node, plain, rotated, cat, parts[0], parts[0].args[0], parts[1]]
                    return t, cos, sin
    return node, None, None


def _side(node: Node, what: str) -> Side:
    """The QK-norm (± rotary) that produces the attention's q or k [B, H, L, D]."""
    internal: list = []
    t, cos, sin = _rope(node, internal)
    if swaps_dims_1_2(t):  # norm, then transpose
        internal.append(t)
        x, weight, eps = _rms_norm(t.args[0], internal)
        return Side(x, False, weight, eps, cos, sin, internal)
    x, weight, eps = _rms_norm(t, internal)  # transpose, then norm
    return Side(x, True, weight, eps, cos, sin, internal)


def _through_cache(node, internal: list):
    """k (or v) when node is HF's KV-cache concatenation cat([empty, k], dim=-2), else node. The concatenation
    is replaced only when the attention is its only reader."""
    if is_call(node, (torch.cat,)) and len(node.args[0]) == 2 and arg(node, 1, "dim", 0) in (-2, 2):
        empty, t = node.args[0]
        if isinstance(empty, Node) and value(empty) is not None and value(empty).numel() == 0:
            if len(node.users) == 1:
                internal.append(node)
            return t
    return node


@dataclasses.dataclass
class Site:
    q: Side
    k: Side
    k_hat: Node  # the normalized, rotated k: its readers outside the site read the op's k̂
    v: Node
    scale: float
    causal: bool
    internal: list


def match_site(sdpa: Node) -> Site:
    q = _side(sdpa.args[0], "q")  # first: an attention whose q is no per-head norm's output is not a site
    if arg(sdpa, 3, "attn_mask") is not None or arg(sdpa, 4, "dropout_p", 0.0) != 0.0:
        raise Reject("attention with a mask or dropout")
    causal = arg(sdpa, 5, "is_causal", False)
    if not isinstance(causal, bool):
        raise Reject("is_causal is not a constant")
    internal: list = []
    k_hat = _through_cache(sdpa.args[1], internal)
    k = _side(k_hat, "k")
    v = _through_cache(sdpa.args[2], internal)
    if (q.cos is None) != (k.cos is None) or q.cos is not k.cos or q.sin is not k.sin:
        raise Reject("q and k are not rotated by the same cos/sin tables")
    q_shape, k_shape = shape(sdpa.args[0]), shape(sdpa.args[1])
    if len(q_shape) != 4 or shape(v) != k_shape or q_shape[1] % k_shape[1]:
        raise Reject(f"shapes q {q_shape}, k {k_shape}, v {shape(v)}: expected [B, H, L, D], GQA by whole groups")
    if q_shape[1] != k_shape[1] and not arg(sdpa, 7, "enable_gqa", False):
        raise Reject("different q and k head counts without enable_gqa")
    scale = arg(sdpa, 6, "scale")
    return Site(q, k, k_hat, v, float(scale) if scale is not None else q_shape[-1] ** -0.5, causal,
                internal + q.internal + k.internal)


def _outside_readers(site: Site, sdpa: Node) -> list:
    inside = set(site.internal) | {sdpa}
    return [n for n in site.internal if n is not site.k_hat for user in n.users if user not in inside]


def _selection_site(site: Site, sdpa: Node) -> selection.QKNormSite:
    B, HQ, L, D = shape(sdpa.args[0])
    HK, S = shape(site.v)[1], shape(site.v)[2]
    q_val = value(sdpa.args[0])
    leaves = (site.q.raw, site.k.raw, site.v, site.q.weight, site.k.weight)
    return selection.QKNormSite(batch=B, q_len=L, kv_len=S, heads=HQ, kv_heads=HK, head_dim=D, dtype=q_val.dtype,
                                device=q_val.device, causal=site.causal, rope=site.q.cos is not None,
                                train=torch.is_grad_enabled() and any(value(t).requires_grad for t in leaves))


def _insertion_point(graph: Graph, sdpa: Node, site: Site) -> Node:
    """The first reader of the op's results (the attention, or a reader of k̂ such as the KV cache); every
    operand of the op must come before it."""
    inside = set(site.internal) | {sdpa}
    readers = [sdpa] + [user for user in site.k_hat.users if user not in inside]
    order = {n: i for i, n in enumerate(graph.nodes)}
    first = min(readers, key=order.get)
    operands = [site.q.raw, site.k.raw, site.v, site.q.weight, site.k.weight, site.q.cos, site.q.sin]
    if any(isinstance(n, Node) and order[n] >= order[first] for n in operands):
        raise Reject("an operand of the op is computed after a reader of its results")
    return first


def _rewrite(graph: Graph, sdpa: Node, site: Site, train: bool, before: Node) -> None:
    with graph.inserting_before(before):
        q, k = (side.raw if side.raw_is_bhld else graph.call_function(torch.transpose, (side.raw, 1, 2))
                for side in (site.q, site.k))
        op = graph.call_function(torch.ops.norm_fusion.qk_norm_attention.default,
                                 (q, k, site.v, site.q.weight, site.k.weight, site.q.cos, site.q.sin, site.q.eps,
                                  site.k.eps, site.scale, site.causal, train))
        out = graph.call_function(operator.getitem, (op, 0))
        k_hat = graph.call_function(operator.getitem, (op, 5))
    sdpa.replace_all_uses_with(out)
    site.k_hat.replace_all_uses_with(k_hat, delete_user_cb=lambda user: user not in site.internal)
    erase_replaced(graph, [sdpa, *site.internal, k_hat])


def apply(graph: Graph, ctx) -> None:
    """Rewrite every QK-norm → SDPA site of ``graph`` (a torch-level graph) that the config selects."""
    for node in list(graph.nodes):
        if not is_call(node, SDPA):
            continue
        try:
            site = match_site(node)
        except NotASite:
            continue
        except Reject as e:
            ctx.reject(ctx.site(FUSION, "sdpa", node), str(e))
            continue
        except Exception as e:  # a graph form the walk did not expect (symbolic sizes, odd arguments)
            ctx.reject(ctx.site(FUSION, "sdpa", node), f"not matched ({type(e).__name__}: {e})")
            continue
        record = ctx.site(FUSION, "rms_norm_rope" if site.q.cos is not None else "rms_norm", node)
        chosen = _selection_site(site, node)
        record.shape, record.dtype = chosen.shape, str(chosen.dtype).replace("torch.", "")
        if any(isinstance(s, torch.SymInt) for s in chosen.shape):
            ctx.reject(record, "dynamic shapes (the site is matched at static shapes only)")
            continue
        readers = _outside_readers(site, node)
        if readers:
            ctx.reject(record, f"an intermediate of the site has another reader ({readers[0].name})")
            continue
        try:
            before = _insertion_point(graph, node, site)
        except Reject as e:
            ctx.reject(record, str(e))
            continue
        choice = selection.choose_qk_norm_attention(chosen, ctx.config)
        if not choice.fused:
            ctx.reject(record, choice.reason, choice.implementation)
            continue
        _rewrite(graph, node, site, chosen.train, before)
        ctx.accept(record, choice.implementation, choice.reason)
