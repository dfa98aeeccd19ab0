"""RMSNorm → matmul ("Lazy Pre-Norm", design.md §1.1).

Finds RMSNorm in the forms model code writes it and rewrites every matmul that reads the normalized tensor as
``norm_fusion::rms_norm_linear(x, γ, W, b, eps)``, which computes ``rstd · ((x·γ) Wᵀ) + b`` in one kernel and
never writes the normalized tensor.

A site is rewritten only when that removes the normalized tensor from the forward pass: at inference every
user of it must be such a matmul; in training the backward may also read it (the partitioner then recomputes it
there from x and the saved rstd, which the fused op returns and the backward is redirected to).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch._inductor import pattern_matcher as pm
from torch.fx import Graph, Node

from norm_fusion_inductor import ops  # noqa: F401  (registers torch.ops.norm_fusion)
from norm_fusion_inductor.selection import MatmulSite, choose

from .common import aten, as_matmul_consumer, flattened_users, getitem, insert_call, size_hint, trace_pattern

FUSION = "rms_norm_matmul"
EPS_PLACEHOLDER = 7.77e-7  # a value no model uses, so the traced graph shows where eps goes


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


def torch_rms_norm(x, weight, eps):
    """F.rms_norm / nn.RMSNorm."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def torch_rms_norm_no_weight(x, eps):
    return F.rms_norm(x, (x.shape[-1],), None, eps)


# name: (search function, weight dtype in the trace: None = no weight, "input" = the input's, or a dtype)
FORMS = {
    "hf_llama": (hf_llama, "input"),
    "hf_llama_no_weight": (hf_llama_no_weight, None),
    "t5": (t5, "input"),
    "gemma": (gemma, torch.float32),
    "torch_rms_norm": (torch_rms_norm, "input"),
    "torch_rms_norm_no_weight": (torch_rms_norm_no_weight, None),
}
# One trace per cast structure: a pattern traced in a 16-bit dtype matches bf16 and fp16 graphs, not fp32 ones.
TRACE_DTYPES = {"half": torch.float16, "fp32": torch.float32}


@functools.lru_cache(maxsize=None)
def pattern_pass() -> pm.PatternMatcherPass:
    matcher = pm.PatternMatcherPass(pass_name="norm_fusion_rms_norm_matmul")
    seen = set()
    for form, (fn, weight_dtype) in FORMS.items():
        for dtype_name, dtype in TRACE_DTYPES.items():
            x = torch.empty(4, 16, dtype=dtype)
            inputs = [x]
            if weight_dtype is not None:
                inputs.append(torch.empty(16, dtype=dtype if weight_dtype == "input" else weight_dtype))
            pattern = trace_pattern(fn, inputs, {"eps": EPS_PLACEHOLDER})
            if repr(pattern) in seen:  # e.g. the fp32 trace of a form whose casts vanish
                continue
            seen.add(repr(pattern))
            handler = functools.partial(_rewrite_site, f"{form}/{dtype_name}")
            pm.register_graph_pattern(pattern, pass_dict=matcher)(handler)
    return matcher


def apply(graph: Graph, ctx) -> None:
    """Run the family over ``graph``; ``ctx`` (passes.PassContext) carries the config and records sites."""
    pattern_pass().apply(graph)


# --- the rewrite -----------------------------------------------------------------------------------------------

def _rewrite_site(pattern_name: str, match: pm.Match, *args, **kwargs) -> None:
    from norm_fusion_inductor.passes import current_context

    ctx = current_context()
    normed = match.output_node()
    x = kwargs["x"]
    gamma = kwargs.get("weight")
    eps = _eps(match)
    site = ctx.site(FUSION, pattern_name, normed)

    reason = _norm_rejection(match, x, gamma, normed)
    consumers, others = [], []
    for user, operand in flattened_users(normed):
        consumer = as_matmul_consumer(user, operand)
        if consumer is not None:
            consumers.append(consumer)
        elif user not in ctx.backward:
            others.append(user)
    if not consumers:
        return  # a norm with no matmul next to it is not this family's site
    N = consumers[0].weight.meta["val"].shape[0]
    x_val = x.meta["val"]
    K = x_val.shape[-1]
    M = size_hint(x_val.numel() // K) if K else 0
    site.shape, site.dtype = (M, K, N), str(x_val.dtype).replace("torch.", "")
    if reason is None and others:
        reason = ("the normalized tensor is also used by " + ", ".join(sorted({str(u.target) for u in others})) +
                  ", so it would still be written")
    if reason is None:
        reason = _operand_rejection(x_val, consumers)
    if reason is not None:
        return ctx.reject(site, reason)

    choices = []
    for c in consumers:
        n = c.weight.meta["val"].shape[0]
        choices.append(choose(MatmulSite(M, K, n, x_val.dtype, x_val.device, gamma is not None, c.bias is not None),
                              ctx.config))
    if not all(ch.fused for ch in choices):
        why = next(ch for ch in choices if not ch.fused)
        return ctx.reject(site, why.reason, implementation=why.implementation)

    graph = normed.graph
    rstd_users = _rstd_users(match)
    op = (torch.ops.norm_fusion.rms_norm_linear.default if not isinstance(eps, Node)
          else torch.ops.norm_fusion.rms_norm_linear_tensor_eps.default)
    for i, c in enumerate(consumers):
        fused = insert_call(graph, op, (x, gamma, c.weight, c.bias, eps), before=c.node)
        out = getitem(graph, fused, 0)
        c.node.replace_all_uses_with(out)
        graph.erase_node(c.node)
        if i == 0 and rstd_users:  # the backward reads rstd: take it from the kernel, not a second reduction
            rstd = getitem(graph, fused, 1)
            for user, rsqrt in rstd_users:
                user.replace_input_with(rsqrt, rstd)
    ctx.accept(site, choices[0].implementation,
               f"{len(consumers)} matmul(s) fused; " + "; ".join(sorted({ch.reason for ch in choices})))


def _norm_rejection(match: pm.Match, x: Node, gamma, normed: Node):
    """Why the matched nodes are not an RMSNorm over the last dim that this kernel computes, or None."""
    x_val = x.meta["val"]
    for node in match.nodes:
        if node.target == aten.mean.dim:
            dims = [d % x_val.dim() for d in node.args[1]]
            if dims != [x_val.dim() - 1]:
                return f"reduction over dim(s) {node.args[1]}, not the last dim"
            if not (len(node.args) > 2 and node.args[2]) and not node.kwargs.get("keepdim"):
                return "mean without keepdim"
    if gamma is not None:
        g = gamma.meta["val"]
        if g.dim() != 1 or g.shape[0] != x_val.shape[-1]:
            return f"norm weight has shape {tuple(g.shape)}, not [{x_val.shape[-1]}]"
    if normed.meta["val"].shape != x_val.shape:
        return "normalized tensor is broadcast to another shape"
    return None


def _operand_rejection(x_val, consumers) -> str | None:
    if x_val.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {x_val.dtype} not supported"
    if not x_val.is_contiguous():
        return "norm input is not contiguous (the kernel reads x as row-major [M, K])"
    for c in consumers:
        w = c.weight.meta["val"]
        if w.dtype != x_val.dtype:
            return f"matmul weight dtype {w.dtype} differs from the norm input's {x_val.dtype} (autocast?)"
        if w.stride(-1) != 1:
            return "matmul weight is not [N, K] row-major"
        if c.bias is not None and c.bias.meta["val"].dtype != x_val.dtype:
            return "bias dtype differs from the input's"
    return None


def _eps(match: pm.Match):
    """eps as the graph holds it: the scalar added to the mean of squares; a graph input (symbolic float) under
    dynamic shapes, which the op takes as it is."""
    for node in match.nodes:
        if node.target in (aten.add.Tensor, aten.add.Scalar) and getattr(node.args[0], "target", None) == aten.mean.dim:
            eps = node.args[1]
            return float(eps) if isinstance(eps, (int, float)) else eps
    return match.kwargs["eps"]


def _rstd_users(match: pm.Match) -> list:
    """(user, rsqrt node) for every reader of rstd outside the matched forward norm (the backward's)."""
    nodes = set(match.nodes)
    found = []
    for node in match.nodes:
        if node.target == aten.rsqrt.default:
            found += [(u, node) for u in node.users if u not in nodes]
    return found
