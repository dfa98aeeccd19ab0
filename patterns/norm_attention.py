"""norm → attention → norm ("FlashNormAttention", design.md §1.5), rewritten into ``norm_fusion::norm_attention``.

Matched in the torch-level graph before autograd (Inductor's pre-grad pass), so that training runs the op's own
backward kernels instead of Inductor's differentiation of the unfused block. The block, as model code writes it
(``attention_ops.norm_attention_block``):

    q_hat = F.layer_norm(q, (W,), γ, β, eps)                   nn.LayerNorm, affine or not
    qh = q_hat.view(B, L, H, D).transpose(1, 2)                 or reshape / permute(0, 2, 1, 3); k, v alike
    a = F.scaled_dot_product_attention(qh, kh, vh[, scale=s])   softmax, no mask, no dropout, not causal
      | (act(qh @ kh.transpose(-2, -1)) * s) @ vh               act: F.gelu (erf, tanh), F.silu, relu(·)²;
                                                                * s or / c, before or after the second matmul
    x = a.transpose(1, 2).reshape(B, L, W) + q_hat              either order; .contiguous() allowed
    out = F.rms_norm(x, (W,), w, eps) + q                       nn.RMSNorm, weight or not; either order

The anchor is the final add; the walk goes back through the RMSNorm, the inner residual, the head merge and the
attention to the LayerNorm, and checks that both adds read the same q. Every intermediate must have no other
reader (else it would still be computed, and the backward of a training graph would need it).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Optional

import torch
import torch.nn.functional as F
from torch.fx import Graph, Node

from norm_fusion_inductor import attention_ops, selection  # noqa: F401  (registers the ops)
from norm_fusion_inductor.kernels import norm_attention as kernels

from .torch_level import (ADD, DIV, LAYER_NORM, MATMUL, MUL, RMS_NORM, SDPA, Reject, arg, is_call, is_view, shape,
                          erase_replaced, skip_contiguous, swaps_dims_1_2, swaps_last_two, value)

FUSION = "norm_attention"

def _heads_of(node: Node, what: str) -> Node:
    """The [B, L, W] tensor that ``node`` ([B, H, L, D]) splits into heads by view + transpose."""
    if not swaps_dims_1_2(node) or not is_view(node.args[0]):
        raise Reject(f"{what} is not split into heads by view/reshape + transpose(1, 2)")
    source = node.args[0].args[0]
    if len(shape(source)) != 3:
        raise Reject(f"{what}'s source is not [B, L, H·D]")
    return source


@dataclasses.dataclass
class Block:
    q: Node
    k: Node
    v: Node
    heads: int
    ln_weight: Optional[Node]
    ln_bias: Optional[Node]
    ln_eps: float
    rms_weight: Optional[Node]
    rms_eps: float
    scale: float
    activation: str
    internal: list  # nodes the op replaces: each must have no reader outside the block
    head_splits: list  # k's and v's views into heads: erased when the op leaves them unread


def _scale_of(node: Node) -> Optional[tuple[Node, float]]:
    """(operand, s) when node is operand * s or operand / c (s = 1/c) for a Python number."""
    if is_call(node, MUL, ("mul",)) and len(node.args) == 2:
        a, b = node.args
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            return a, float(b)
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            return b, float(a)
    if is_call(node, DIV, ("div",)) and len(node.args) == 2 and isinstance(node.args[1], (int, float)):
        return node.args[0], 1.0 / node.args[1]
    return None


def _activation_of(node: Node) -> Optional[tuple[Node, str]]:
    """(input, name) when node is one of the kernel's activations of its input."""
    if is_call(node, (F.silu,)):
        return node.args[0], "silu"
    if is_call(node, (F.gelu,)):
        approximate = arg(node, 1, "approximate", "none")
        return node.args[0], {"none": "gelu", "tanh": "gelu_tanh"}.get(approximate)
    squared = None
    if is_call(node, (torch.square,), ("square",)):
        squared = node.args[0]
    elif is_call(node, (operator.pow, torch.pow), ("pow",)) and len(node.args) == 2 and node.args[1] == 2:
        squared = node.args[0]
    if squared is not None and is_call(squared, (torch.relu, F.relu), ("relu",)):
        return squared.args[0], "relu2"
    return None


def _attention(a: Node, internal: list) -> tuple[Node, Node, Node, float, str]:
    """(qh, kh, vh, scale, activation) of the attention that produces ``a`` [B, H, L, D]."""
    if is_call(a, SDPA):
        if arg(a, 3, "attn_mask") is not None or arg(a, 4, "dropout_p", 0.0) != 0.0:
            raise Reject("attention with a mask or dropout")
        if arg(a, 5, "is_causal", False) or arg(a, 7, "enable_gqa", False):
            raise Reject("causal or GQA attention (not in the fused block)")
        scale = arg(a, 6, "scale")
        qh, kh, vh = a.args[:3]
        internal.append(a)
        return qh, kh, vh, scale if scale is not None else shape(qh)[-1] ** -0.5, "softmax"
    scale = 1.0
    scaled = _scale_of(a)
    if scaled is not None:  # (act(S) @ V) * s
        internal.append(a)
        a, scale = scaled
    if not is_call(a, MATMUL):
        raise Reject("the attention is neither F.scaled_dot_product_attention nor act(q kᵀ)·s @ v")
    p, vh = a.args[:2]
    internal.append(a)
    scaled = _scale_of(p)
    if scaled is not None:
        internal.append(p)
        p, s = scaled
        scale *= s
    found = _activation_of(p)
    if found is None or found[1] is None:
        raise Reject(f"no supported activation before the second matmul ({sorted(kernels.ACTIVATIONS)})")
    scores, activation = found
    internal.append(p)
    if isinstance(p.args[0], Node) and p.args[0] is not scores:  # relu(s)²: the relu node
        internal.append(p.args[0])
    if not is_call(scores, MATMUL) or not swaps_last_two(scores.args[1]):
        raise Reject("the scores are not q @ k.transpose(-2, -1)")
    internal += [scores, scores.args[1]]
    return scores.args[0], scores.args[1].args[0], vh, scale, activation


def match_block(final_add: Node) -> Block:
    """The block ending at ``final_add`` (= rms_norm(x) + q), or Reject."""
    if not is_call(final_add, ADD, ("add",)) or len(final_add.args) != 2:
        raise Reject("not an add")
    rms, q = final_add.args
    if not is_call(rms, RMS_NORM):
        rms, q = q, rms
    if not is_call(rms, RMS_NORM):
        raise Reject("not rms_norm(x) + q")
    x = rms.args[0]
    width = shape(x)[-1]
    if tuple(arg(rms, 1, "normalized_shape")) != (width,):
        raise Reject("the RMSNorm does not span the last dimension alone")
    if not is_call(x, ADD, ("add",)) or len(x.args) != 2:
        raise Reject("the RMSNorm's input is not a residual add")
    merged, q_hat = x.args
    if not is_call(q_hat, LAYER_NORM):
        merged, q_hat = q_hat, merged
    if not is_call(q_hat, LAYER_NORM) or q_hat.args[0] is not q:
        raise Reject("the inner residual is not the LayerNorm of the same q")
    if tuple(arg(q_hat, 1, "normalized_shape")) != (width,):
        raise Reject("the LayerNorm does not span the last dimension alone")
    internal = [rms, x, q_hat]
    merged = skip_contiguous(merged, internal)
    if not is_view(merged):
        raise Reject("the heads are not merged by view/reshape")
    internal.append(merged)
    swapped = skip_contiguous(merged.args[0], internal)
    if not swaps_dims_1_2(swapped):
        raise Reject("the heads are not merged by transpose(1, 2)")
    internal.append(swapped)
    qh, kh, vh, scale, activation = _attention(swapped.args[0], internal)
    if _heads_of(qh, "q") is not q_hat:
        raise Reject("the attention's q is not the LayerNorm's output")
    internal += [qh, qh.args[0]]
    k, v = _heads_of(kh, "k"), _heads_of(vh, "v")
    heads = shape(qh)[1]
    q_shape, k_shape = shape(q), shape(k)
    if len(q_shape) != 3 or k_shape != shape(v) or k_shape[0] != q_shape[0] or k_shape[2] != width:
        raise Reject(f"shapes q {q_shape}, k {k_shape}, v {shape(v)}: expected [B, L, W] and [B, Lk, W]")
    ln_eps = arg(q_hat, 4, "eps", 1e-5)
    rms_eps = arg(rms, 3, "eps", None)
    if rms_eps is None:
        rms_eps = torch.finfo(value(x).dtype).eps
    return Block(q, k, v, heads, arg(q_hat, 2, "weight"), arg(q_hat, 3, "bias"), float(ln_eps),
                 arg(rms, 2, "weight"), float(rms_eps), float(scale), activation, internal,
                 [kh, kh.args[0], vh, vh.args[0]])


def _looks_like_block(final_add: Node) -> bool:
    """rms_norm(x) + q with x = something + layer_norm(...): the skeleton of the block, worth a report when the
    rest does not match."""
    rms = next(a for a in final_add.args if is_call(a, RMS_NORM))
    x = rms.args[0]
    return is_call(x, ADD, ("add",)) and any(is_call(a, LAYER_NORM) for a in x.args)


def _outside_readers(block: Block, final_add: Node) -> list:
    inside = set(block.internal) | {final_add}
    return [n for n in block.internal for user in n.users if user not in inside]


def _site(block: Block) -> selection.AttentionSite:
    q, k, v = value(block.q), value(block.k), value(block.v)
    operands = (block.q, block.k, block.v, block.ln_weight, block.ln_bias, block.rms_weight)
    train = torch.is_grad_enabled() and any(value(t).requires_grad for t in operands if t is not None)
    return selection.AttentionSite(batch=q.shape[0], q_len=q.shape[1], kv_len=k.shape[1], heads=block.heads,
                                   head_dim=q.shape[2] // block.heads, dtype=q.dtype, device=q.device,
                                   activation=block.activation, has_ln_weight=block.ln_weight is not None,
                                   has_ln_bias=block.ln_bias is not None,
                                   has_rms_weight=block.rms_weight is not None, train=train,
                                   kv_grad=train and (k.requires_grad or v.requires_grad))


def _rewrite(graph: Graph, final_add: Node, block: Block) -> None:
    B, L, W = shape(block.q)
    with graph.inserting_before(final_add):
        rows = graph.call_function(torch.reshape, (block.q, (B * L, W)))
        offsets = graph.call_function(torch.arange, (0, (B + 1) * L, L),
                                      {"device": value(block.q).device, "dtype": torch.int32})
        op = graph.call_function(torch.ops.norm_fusion.norm_attention.default,
                                 (rows, block.k, block.v, offsets, L, block.heads, block.ln_weight, block.ln_bias,
                                  block.rms_weight, block.scale, block.activation, block.ln_eps, block.rms_eps))
        out = graph.call_function(operator.getitem, (op, 0))
        out = graph.call_function(torch.reshape, (out, (B, L, W)))
    final_add.replace_all_uses_with(out)
    erase_replaced(graph, [final_add, *block.internal, *block.head_splits])


def apply(graph: Graph, ctx) -> None:
    """Rewrite every norm → attention → norm block of ``graph`` (a torch-level graph) that the config selects."""
    for node in list(graph.nodes):
        if not is_call(node, ADD, ("add",)) or len(node.args) != 2 or not any(is_call(a, RMS_NORM) for a in node.args):
            continue
        site = ctx.site(FUSION, "rms_norm(x) + q", node)
        try:
            block = match_block(node)
        except Reject as e:
            if _looks_like_block(node):  # else an RMSNorm + add with no LayerNorm residual: not this family's
                ctx.reject(site, str(e))
            continue
        except Exception as e:  # a graph form the walk did not expect (symbolic sizes, odd arguments)
            ctx.reject(site, f"not matched ({type(e).__name__}: {e})")
            continue
        site.pattern = f"{block.activation} attention"
        attention_site = _site(block)
        site.shape, site.dtype = attention_site.shape, str(attention_site.dtype).replace("torch.", "")
        if any(isinstance(s, torch.SymInt) for s in attention_site.shape):
            ctx.reject(site, "dynamic shapes (the block is matched at static shapes only)")
            continue
        readers = _outside_readers(block, node)
        if readers:
            ctx.reject(site, f"an intermediate of the block has another reader ({readers[0].name})")
            continue
        choice = selection.choose_attention(attention_site, ctx.config)
        if not choice.fused:
            ctx.reject(site, choice.reason, choice.implementation)
            continue
        _rewrite(graph, node, block)
        ctx.accept(site, choice.implementation, choice.reason)

