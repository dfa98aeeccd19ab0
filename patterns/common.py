"""Shared pieces of the pattern families: the families' matcher over traced norm forms (``tracing.py``),
finding the matmuls that consume a normalized tensor, inserting nodes with fake values, and the report of the
norms no family took."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
from typing import Any, Callable, Iterable, Optional

import torch
from torch._inductor import pattern_matcher as pm
from torch.fx import Graph, Node

from norm_fusion_inductor.report import Implementation

from .tracing import traced_norm_forms

aten = torch.ops.aten

VIEW_OPS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)


class NormFamily:
    """A pattern family: the norm's forms (traced into patterns on first use) and the spec of its fused op.
    ``forms`` maps a form's name to (search function (x, *params, eps), dtypes of the params: "input" = the
    input's dtype, or a dtype)."""

    def __init__(self, spec: "NormSpec", forms: dict, rewrite: Callable):
        self.spec, self.forms = spec, forms
        self.rewrite = rewrite  # (spec, pattern name, match, ctx)
        self._ctx = None

    def apply(self, graph: Graph, ctx) -> None:
        """Run over ``graph``; ``ctx`` (passes.PassContext) carries the config and records the sites."""
        self._ctx = ctx
        try:
            self.matcher.apply(graph)
        finally:
            self._ctx = None

    @functools.cached_property
    def matcher(self) -> pm.PatternMatcherPass:
        matcher = pm.PatternMatcherPass(pass_name=f"norm_fusion_{self.spec.fusion}_{self.spec.norm}")
        for name, pattern in traced_norm_forms(self.forms):
            pm.register_graph_pattern(pattern, pass_dict=matcher)(functools.partial(self._rewrite, name))
        return matcher

    def _rewrite(self, pattern_name: str, match: pm.Match, *args, **kwargs) -> None:
        self.rewrite(self.spec, pattern_name, match, self._ctx)


@dataclasses.dataclass
class MatmulConsumer:
    """A matmul that reads the normalized tensor as its A operand: ``out[M, N] = a[M, K] @ W[N, K]ᵀ (+ bias)``,
    or ``a @ W[K, N]`` (+ bias) with ``weight_kn`` (GPT-2's Conv1D)."""

    node: Node  # the mm / addmm node
    weight: Node  # W [N, K], or [K, N] with weight_kn
    bias: Optional[Node]
    weight_kn: bool = False
    scale: float = 1.0  # the normalized tensor was multiplied by this scalar on its way (folded into γ, β)

    @property
    def n(self):
        return self.weight.meta["val"].shape[1 if self.weight_kn else 0]


def _is_transpose_of_2d(node: Node) -> Optional[Node]:
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    if node.target == aten.permute.default and list(node.args[1]) in ([1, 0], [-1, -2], [-1, 0], [1, -2]):
        src = node.args[0]
    elif node.target == aten.t.default or (node.target == aten.transpose.int
                                           and len(node.args[0].meta["val"].shape) == 2):
        src = node.args[0]
    else:
        return None
    return src if isinstance(src, Node) and len(src.meta["val"].shape) == 2 else None


def as_matmul_consumer(node: Node, a_operand: Node) -> Optional[MatmulConsumer]:
    """``node`` as ``a_operand @ Wᵀ (+ bias)`` with W [N, K] (nn.Linear), or ``a_operand @ W (+ bias)`` with a
    2-D W [K, N] (Conv1D); else None."""
    if node.op != "call_function":
        return None
    if node.target == aten.mm.default and node.args[0] is a_operand:
        b_operand, bias = node.args[1], None
    elif node.target == aten.addmm.default and node.args[1] is a_operand and not node.kwargs:
        b_operand, bias = node.args[2], node.args[0]
        if not isinstance(bias, Node):
            return None
    else:
        return None
    weight = _is_transpose_of_2d(b_operand)
    consumer = (MatmulConsumer(node, weight, bias) if weight is not None
                else MatmulConsumer(node, b_operand, bias, weight_kn=True))
    if not isinstance(consumer.weight, Node) or len(consumer.weight.meta["val"].shape) != 2:
        return None
    if bias is not None and tuple(bias.meta["val"].shape) != (consumer.n,):
        return None
    return consumer


def flattened_users(normed: Node) -> Iterable[tuple[Node, Node, float]]:
    """(user, operand, scale) triples: users of ``normed``, of its [M, K] flattening views (3-D inputs), and of
    its product with a Python scalar (T5 scales its final norm by d_model^-0.5 before the tied lm_head), with
    that scalar."""
    K = normed.meta["val"].shape[-1]
    for user in normed.users:
        scale = _scalar_factor(user, normed)
        if scale is not None:
            for inner, operand, inner_scale in flattened_users(user):
                yield inner, operand, scale * inner_scale
        elif user.target in VIEW_OPS and _is_row_flatten(user, K):
            for inner in user.users:
                yield inner, user, 1.0
        else:
            yield user, normed, 1.0


def _scalar_factor(node: Node, operand: Node) -> Optional[float]:
    """c when ``node`` is ``operand * c`` for a Python number c (shape and dtype unchanged), else None."""
    if node.target not in (aten.mul.Tensor, aten.mul.Scalar) or len(node.args) != 2:
        return None
    a, b = node.args
    c = b if a is operand else a if b is operand else None
    if isinstance(c, bool) or not isinstance(c, (int, float)):
        return None
    same = node.meta["val"].shape == operand.meta["val"].shape and node.meta["val"].dtype == operand.meta["val"].dtype
    return float(c) if same else None


def _is_row_flatten(view: Node, K) -> bool:
    shape = view.meta["val"].shape
    return len(shape) == 2 and shape[1] == K


def backward_only_nodes(graph: Graph) -> set:
    """Nodes that only the backward half of a joint graph needs: those that depend on a tangent input, and
    forward nodes whose every user is such a node (e.g. the transpose of an activation for a weight gradient).
    Empty at inference. The partitioner may recompute these in the backward graph."""
    backward: set = set()
    stack = [n for n in graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")]
    while stack:
        n = stack.pop()
        if n in backward:
            continue
        backward.add(n)
        stack.extend(u for u in n.users if u.op != "output")
    if not backward:
        return backward
    for n in reversed(graph.nodes):  # users come after their inputs: one reverse sweep settles it
        if n not in backward and n.op == "call_function" and n.users and all(u in backward for u in n.users):
            backward.add(n)
    return backward


def insert_call(graph: Graph, target, args: tuple, before: Node, kwargs: Optional[dict] = None) -> Node:
    """Insert ``target(*args, **kwargs)`` before ``before`` and give it a fake value, as Inductor's passes
    expect."""
    kwargs = kwargs or {}
    with graph.inserting_before(before):
        node = graph.call_function(target, args, kwargs)
    vals = [a.meta["val"] for a in args if isinstance(a, Node)] or [before.meta["val"]]
    fake_mode = torch._guards.detect_fake_mode(vals)
    fake_args = tuple(a.meta["val"] if isinstance(a, Node) else a for a in args)
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        node.meta["val"] = target(*fake_args, **kwargs)
    return node


def getitem(graph: Graph, node: Node, index: int) -> Node:
    with graph.inserting_after(node):
        item = graph.call_function(operator.getitem, (node, index))
    item.meta["val"] = node.meta["val"][index]
    return item


def size_hint(value) -> int:
    """A concrete size for a possibly symbolic one (dynamic shapes): the hint the graph was traced with."""
    if isinstance(value, torch.SymInt):
        hint = value.node.hint
        return int(hint) if hint is not None else 8192
    return int(value)


# --- one norm site: checks, the choice, the rewrite ----------------------------------------------------------------

REDUCTIONS = (aten.mean.dim, aten.var_mean.correction)


@dataclasses.dataclass
class NormSpec:
    """What a pattern family contributes to the shared site handling."""

    fusion: str  # the family's name in the config, e.g. "regrouped_norm"
    norm: str  # "rms" or "ln"
    stats: dict  # graph node target → index of the fused op's output that replaces it for its other readers
    position: str = "pre"  # "pre": norm → matmul; "post": matmul → norm
    op: Any = None  # the post-norm's fused op (float eps) and its eps-as-tensor twin (dynamic shapes)
    op_tensor_eps: Any = None
    eps_arg: int = -2  # position of eps in the fused op's arguments


def also_read_reason(readers: Iterable[Node]) -> str:
    """Why a site stays unfused when its normalized tensor has readers besides the rewritten matmuls: one wording
    for every reader the regrouped rewrite cannot serve."""
    return ("the normalized tensor is also used by " + ", ".join(sorted({str(u.target) for u in readers}))
            + ", so it would still be written")


def backward_reads_normed(normed: Node, ctx) -> bool:
    """Whether the backward reads the normalized tensor (a weight gradient, dW = dYᵀ·n): the rewrite then does
    not remove it, the partitioner recomputes (or saves) it, and its write is not a saving to price."""
    return any(user in ctx.backward for user, _, _ in flattened_users(normed))


def _implementation(choice, launches) -> str:
    if choice.implementation == Implementation.FUSED_TRITON:
        return choice.implementation + " (" + "; ".join(sorted(launches)) + ")"
    return choice.implementation


def insert_fused(spec: NormSpec, args: tuple, choice, config, before: Node) -> tuple[list, str]:
    """Insert the fused computation before ``before``: the op's outputs as nodes, and how it launches.

    "direct launch": the kernel itself (traced with the choice's block config, ops.trace_direct_launch), so Inductor
    launches it from its generated code. Otherwise the custom op, which picks its block config at run time: for
    launch="op", sites the trace cannot take (dynamic M, eps as a graph tensor, no tuned config, the reference op),
    and when the trace fails (logged; the op computes the same)."""
    from norm_fusion_inductor import ops

    graph = before.graph
    why_op = _direct_launch_rejection(args, choice, config, spec.eps_arg)
    if why_op is None:
        values = tuple(a.meta["val"] if isinstance(a, Node) else a for a in args)
        try:
            traced = ops.trace_direct_launch(values, choice.plan)
        except Exception as e:  # the op is always there to fall back on
            why_op = f"direct launch failed to trace ({type(e).__name__}: {e})"
        else:
            tensor_args = [a for a in args if isinstance(a, Node)]
            with graph.inserting_before(before):
                outputs = graph.graph_copy(traced.graph, dict(zip(traced.graph.find_nodes(op="placeholder"),
                                                                  tensor_args)))
            return list(outputs), "direct launch"
    op = spec.op if not isinstance(args[spec.eps_arg], Node) else spec.op_tensor_eps
    fused = insert_call(graph, op, args, before=before)
    return [getitem(graph, fused, i) for i in range(len(fused.meta["val"]))], f"custom op: {why_op}"


def _direct_launch_rejection(args: tuple, choice, config, eps_arg: int = -2) -> Optional[str]:
    if config.launch != "direct":
        return "launch='op'"
    if choice.implementation != Implementation.FUSED_TRITON or choice.plan is None:
        return "no tuned kernel config"
    if isinstance(args[eps_arg], Node):
        return "eps is a graph tensor"
    x = args[0].meta["val"]
    if any(isinstance(d, torch.SymInt) for d in x.shape):
        return "dynamic shape"
    for a in args:
        if isinstance(a, Node) and (a.meta["val"].storage_offset() * a.meta["val"].element_size()) % 16:
            return f"{a.name} starts at an offset that is not 16-byte aligned"
    return None


def _norm_rejection(match: pm.Match, x: Node, gamma, beta, normed: Node) -> Optional[str]:
    """Why the matched nodes are not a norm over the last dim that the kernel computes, or None."""
    x_val = x.meta["val"]
    for node in match.nodes:
        if node.target in REDUCTIONS:
            dims = [d % x_val.dim() for d in node.args[1]]
            if dims != [x_val.dim() - 1]:
                return f"reduction over dim(s) {node.args[1]}, not the last dim"
            keepdim = node.kwargs.get("keepdim", node.args[2] if len(node.args) > 2 else False)
            if not keepdim:
                return "reduction without keepdim"
    for name, param in (("weight", gamma), ("bias", beta)):
        if param is not None:
            p = param.meta["val"]
            if p.dim() != 1 or p.shape[0] != x_val.shape[-1]:
                return f"norm {name} has shape {tuple(p.shape)}, not [{x_val.shape[-1]}]"
    if normed.meta["val"].shape != x_val.shape:
        return "normalized tensor is broadcast to another shape"
    return None


def _operand_rejection(x_val, consumers) -> Optional[str]:
    if x_val.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {x_val.dtype} not supported"
    if not x_val.is_contiguous():
        return "norm input is not contiguous (the kernel reads x as row-major [M, K])"
    for c in consumers:
        w = c.weight.meta["val"]
        if w.dtype != x_val.dtype:
            return f"matmul weight dtype {w.dtype} differs from the norm input's {x_val.dtype} (autocast?)"
        if w.stride(-1) != 1:
            return "matmul weight rows are not contiguous"
        if c.bias is not None and c.bias.meta["val"].dtype != x_val.dtype:
            return "bias dtype differs from the input's"
    return None


def is_rsqrt(node: Node) -> bool:
    """Whether ``node`` is a reciprocal square root: aten.rsqrt, or pow(·, -0.5) as Gemma 4's RMSNorm writes it
    (``torch.pow(mean + eps, -0.5)``)."""
    return node.target == aten.rsqrt.default or (node.target == aten.pow.Tensor_Scalar and node.args[1] == -0.5)


def _eps(match: pm.Match):
    """eps as the graph holds it: what is added to the variance (or mean square) under the rsqrt; a graph input
    (0-d tensor) under dynamic shapes, which the op's tensor-eps twin takes."""
    for node in match.nodes:
        if is_rsqrt(node):
            added = node.args[0]
            if getattr(added, "target", None) in (aten.add.Tensor, aten.add.Scalar):
                eps = added.args[1]
                return float(eps) if isinstance(eps, (int, float)) else eps
    return match.kwargs["eps"]


def is_row_mean(node: Node) -> bool:
    """Whether ``node`` is a LayerNorm's row mean: var_mean's mean, or a mean that is not of squares (the
    written-out form's first reduction; an RMSNorm's and the variance's are of a pow)."""
    if node.target is operator.getitem and node.args[0].target == aten.var_mean.correction:
        return node.args[1] == 1
    return node.target == aten.mean.dim and getattr(node.args[0], "target", None) != aten.pow.Tensor_Scalar


def _stat_readers(match: pm.Match, stats: dict) -> dict:
    """{output index: [(reader, node)]} for every reader of a statistic outside the matched norm (``stats``:
    keyed by node target, ("var_mean", output) for var_mean's outputs, "mean" for a written-out row mean;
    aten.rsqrt.default for either form of the rsqrt, ``is_rsqrt``)."""
    nodes = set(match.nodes)
    readers: dict = {}
    for node in match.nodes:
        if node.target is operator.getitem and node.args[0].target == aten.var_mean.correction:
            index = stats.get(("var_mean", node.args[1]))  # var_mean's outputs: (var, mean)
        elif node.target == aten.mean.dim and is_row_mean(node):
            index = stats.get("mean")
        elif is_rsqrt(node):
            index = stats.get(aten.rsqrt.default)
        else:
            index = stats.get(node.target)
        if index is not None:
            readers.setdefault(index, []).extend((u, node) for u in node.users if u not in nodes)
    return readers


# --- norms no family took: reported once, with what they feed --------------------------------------------------

ATTENTION_NAMES = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")
_THROUGH = (aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.neg.default, torch.ops.prims.convert_element_type.default,
            aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.permute.default,
            aten.transpose.int, aten.expand.default, aten.clone.default, aten.cat.default, aten.slice.Tensor,
            aten.unsqueeze.default, aten.squeeze.dim, aten.alias.default, aten.mul.Scalar, aten.split.Tensor,
            aten.split_with_sizes.default)  # RoPE's rotate-half by chunk; attention's scale where it is decomposed


def _norm_input(rsqrt: Node) -> Optional[tuple[str, Node]]:
    """("rms" | "ln", x) when ``rsqrt`` is a norm's rsqrt(mean(x²) + eps) or rsqrt(var(x) + eps)."""
    added = rsqrt.args[0]
    if getattr(added, "target", None) not in (aten.add.Tensor, aten.add.Scalar):
        return None
    stat = added.args[0]
    if getattr(stat, "target", None) == operator.getitem and stat.args[0].target == aten.var_mean.correction:
        return "ln", stat.args[0].args[0]
    if getattr(stat, "target", None) == aten.mean.dim:
        square = stat.args[0]
        if getattr(square, "target", None) == aten.pow.Tensor_Scalar and square.args[1] == 2:
            base = square.args[0]  # x, or x − mean(x): the written-out LayerNorm's variance
            if (getattr(base, "target", None) == aten.sub.Tensor and is_row_mean(base.args[1])
                    and base.args[1].args[0] is base.args[0]):
                return "ln", base.args[0]
            return "rms", base
    return None


def _fed(rsqrt: Node, backward: set) -> tuple[str, set, list]:
    """What the normalized tensor reaches through pointwise and view ops: "attention", "matmul" or "other", the
    names of the ops it stops at, and (for attention or a matmul) the nodes on the way to it, from ``rsqrt``."""
    seen, stack, stops, parent = set(), [rsqrt], set(), {}

    def path_to(n):
        path = [n]
        while n in parent:
            n = parent[n]
            path.append(n)
        return path[::-1]

    while stack:
        node = stack.pop()
        for user in node.users:
            if user in seen or user in backward:
                continue
            seen.add(user)
            parent[user] = node
            name = str(user.target)
            if any(a in name for a in ATTENTION_NAMES):
                return "attention", {name}, path_to(user)
            if user.target in (aten.mm.default, aten.addmm.default, aten.bmm.default):
                return "matmul", {name}, path_to(user)[1:]
            if user.target in _THROUGH or user.target == operator.getitem:
                stack.append(user)
            else:
                stops.add(name)
    return "other", stops, []


_LAYOUT_OPS = (aten.permute.default, aten.transpose.int, aten.expand.default, aten.slice.Tensor, aten.cat.default)


def _matmul_form_reason(x: Node, path: list) -> str:
    """Why no family took a norm that does reach a matmul, naming the cause: a layout change on the way, a
    batched matmul, an input that is not row-major."""
    matmul = path[-1]
    x_val = x.meta["val"]
    if not x_val.is_contiguous():
        return (f"feeds a matmul, but the norm's input is not row-major (shape {tuple(x_val.shape)}, strides "
                f"{tuple(x_val.stride())}): the fused GEMMs read it as contiguous [M, K] rows")
    layout = [str(n.target).split(".")[-2] for n in path[:-1] if n.target in _LAYOUT_OPS]
    if layout:
        return (f"reaches the matmul through {', '.join(layout)} (a transposed, broadcast or sliced layout): the "
                "fused GEMMs take the normalized rows as the A operand, [M, K] row-major")
    if matmul.target == aten.bmm.default:
        return "feeds a batched matmul (aten.bmm), which no family fuses"
    if matmul.target in (aten.mm.default, aten.addmm.default) and matmul.args[-1] is path[-2]:
        return "is the matmul's B operand (the weight side), not its A operand"
    return ("feeds a matmul in a form no family matched (on the way: "
            + ", ".join(str(n.target).split(".")[-2] for n in path) + ")")


_TO_PROJECTION = (*VIEW_OPS, aten.transpose.int, aten.permute.default, aten.clone.default, aten.split.Tensor,
                  aten.split_with_sizes.default, operator.getitem, torch.ops.prims.convert_element_type.default)


def _projection_of(x: Node) -> Optional[Node]:
    """The node that computes the q/k projection a per-head norm's input ``x`` is a view of (through views, the
    heads' transpose, a dtype cast and the output gates' split), or None."""
    node = x
    while isinstance(node, Node) and node.target in _TO_PROJECTION:
        node = node.args[0]
    return node if isinstance(node, Node) else None


def _residual_add(add: Node) -> bool:
    """Whether ``add`` adds two tensors of its own rank (a residual stream), not a lower-rank bias."""
    ranks = [getattr(n.meta.get("val"), "ndim", None) if isinstance(n, Node) else None for n in (add, *add.args[:2])]
    return ranks[0] is not None and ranks[1] == ranks[2] == ranks[0]


def _reads_a_norm(a: Node, depth: int = 8) -> bool:
    """Whether the matmul operand ``a`` is a norm's output: an rsqrt within ``depth`` pointwise or view ops,
    not through a residual add (an add of two tensors of the output's rank; a LayerNorm's bias add has a lower
    one), which would find the norm of a post-norm block before the stream."""
    stack = [(a, 0)]
    while stack:
        node, d = stack.pop()
        if not isinstance(node, Node) or d > depth:
            continue
        if is_rsqrt(node):
            return True
        if node.target == aten.add.Tensor and _residual_add(node):
            continue
        if node.target in _THROUGH:
            stack.extend((n, d + 1) for n in node.all_input_nodes)
    return False


def _qk_norm_reason(ctx, head_dim: int, x: Node) -> str:
    """Why a per-head q/k norm is left: only the regrouped family fuses one, into the epilogue of the q/k
    projection it rewrites (regrouped_norm._find_head_norm)."""
    from norm_fusion_inductor.regrouped import head_dim_problem

    if "regrouped_norm" not in ctx.config.fusions:
        return ("only the regrouped_norm family fuses it, into its q/k projection's epilogue, and that family is "
                "off (fusions 'regrouped_norm')")
    if head_dim_problem(head_dim):
        return "the q/k projection's epilogue cannot take it: " + head_dim_problem(head_dim)
    projection = _projection_of(x)
    if projection is not None and projection.target in (aten.mm.default, aten.addmm.default):
        if _reads_a_norm(projection.args[0 if projection.target == aten.mm.default else 1]):
            return ("its q/k projection stayed Inductor's matmul (not rewritten: the record of the norm it reads, "
                    "regrouped_norm, says why), and only a rewritten projection's epilogue takes it")
        return ("its q/k projection reads no normalized tensor (a post-norm block's), so no regrouped site "
                "rewrites it, and only a rewritten projection's epilogue takes it")
    return ("the regrouped_norm family did not take it into its q/k projection's epilogue (it takes a per-head "
            "RMSNorm or bias-free LayerNorm with a weight of [D] or [H, D], ± RoPE, right after the projection's "
            "[B, L, H, D] view, its only reader)")


def report_leftover_norms(graph: Graph, ctx) -> None:
    """Record, once each, the RMSNorms and LayerNorms of the forward that no family recorded: per-head q/k norms
    feeding attention (QK-norm) that the regrouped family left, and norms with no matmul or attention next to
    them."""
    for node in graph.nodes:
        if not is_rsqrt(node) or node in ctx.covered or node in ctx.backward:
            continue
        found = _norm_input(node)
        if found is None:
            continue
        norm, x = found
        fed, stops, path = _fed(node, ctx.backward)
        if fed == "attention" and x.meta["val"].dim() >= 4 and path[-1].args[2:3] == (path[-2],):
            site = ctx.site("qk_norm", norm, node)  # attention's (q, k, v, ...): a per-head norm of v
            reason = ("feeds attention as its values: a per-head norm of v, which no family fuses (the q/k "
                      "projections' epilogue takes the per-head norms of q and k)")
        elif fed == "attention" and x.meta["val"].dim() >= 4:  # [B, L, H, D]: normalized per head
            site = ctx.site("qk_norm", norm, node)
            reason = ("feeds attention: a per-head q/k norm (QK-norm); "
                      + _qk_norm_reason(ctx, size_hint(x.meta["val"].shape[-1]), x))
        elif fed == "attention":
            site = ctx.site("standalone", norm, node)
            reason = ("feeds attention: a full-width norm fuses with attention only inside the norm → attention "
                      "→ norm block (its own record says why not here)")
        elif fed == "matmul":
            site = ctx.site("standalone", norm, node)
            reason = _matmul_form_reason(x, path)
            if "regrouped_norm" not in ctx.config.fusions and reason.startswith("feeds a matmul in a form"):
                reason = ("feeds a matmul: a pre-norm site is the regrouped_norm family's, and that family is off "
                          "(fusions 'regrouped_norm')")
        else:
            site = ctx.site("standalone", norm, node)
            reason = "feeds no matmul or attention (its readers: " + ", ".join(sorted(stops)[:4]) + ")"
        x_val = x.meta["val"]
        K = x_val.shape[-1]
        site.shape = (size_hint(x_val.numel() // K) if K else 0, K)
        site.dtype = str(x_val.dtype).replace("torch.", "")
        ctx.reject(site, reason)
