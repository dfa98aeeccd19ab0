"""Regrouped normalization (docs/design.md §4): the norm's work moves into the epilogues of the GEMMs around it.

* **Consumers.** Every matmul that reads a matched RMSNorm / LayerNorm output (the pre-norm families'
  matches, ``pre_norm.rewrite_pre_norm_site``) is rewritten to read the norm's *input* with γ folded into its
  weight; its epilogue applies rstd (and LayerNorm's mean correction through the column sums u of the folded
  weight), the bias (v = Wβ + b for LayerNorm) and the activation that follows the matmul — GELU (erf or tanh),
  SiLU, ReLU, or a gated ``act(gate) · up`` of two consumers of the same norm (SwiGLU) — before its single write. The
  normalized tensor and the matmul's raw output are never written; in training the pre-activation is written
  once more (``aux``) because the backward reads it.
* **QK-norm** (Qwen3- and Gemma3-style attention): a consumer whose output is viewed per head
  (``proj(h).view(B, L, H, D)``) and normalized per head by an RMSNorm, before or after ``.transpose(1, 2)``, then
  rotated (rotate-half RoPE with the model's cos/sin), takes the per-head norm and RoPE into its epilogue too; q
  and k are written once, already normalized and rotated, and the attention stays the model's own (any backend,
  mask, GQA). In training the epilogue also writes the projection's output (``aux``), which the norm's backward
  reads: the model's per-head norm nodes stay in the graph for the backward, fed from it. Without a per-head
  norm (Llama), the RoPE right after the view's transpose goes into the epilogue alone (its backward reads only
  cos and sin).
* **Producer.** Where the norm's input is ``x @ Wᵀ (+ b) + residual`` (o_proj / down_proj / fc2 plus the
  residual stream), that GEMM is rewritten to add bias and residual in its epilogue and to write per-segment
  partial row statistics; a tiny finish gives rstd (and μ), which the consumers and the backward read instead
  of a separate reduction over the stream. Without such a producer (the first norm of a stack) the statistics
  stay Inductor's own reduction.
* **Post-norm** (BERT: ``h = LN(x Wᵀ + b + r)`` read by the next matmuls *and* as the next residual): the next
  producer reads the un-normalized stream as its residual and normalizes it on load (rstd, μ, γ, β of this
  norm), so h itself is never written in the forward.

The backward stays Inductor's: it reads x, the statistics and the pre-activation, all of which the rewrite keeps,
and the normalized tensor where a weight gradient needs it (the partitioner recomputes it there), so in training
the selection does not count that tensor's write as saved (``backward_reads_normed``).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Callable, NamedTuple, Optional

import torch
from torch._inductor import pattern_matcher as pm
from torch.fx import Graph, Node

from norm_fusion_inductor import regrouped  # registers torch.ops.norm_fusion.epilogue_gemm
from norm_fusion_inductor.report import Implementation

from .common import (VIEW_OPS, _eps, also_read_reason, aten, as_matmul_consumer, backward_reads_normed, is_row_mean,
                     is_rsqrt, size_hint)
from .tracing import TRACE_DTYPES, cached_pattern, traced_norm_forms
from .norm_forms import ACTIVATION_FORMS, GATED_FORMS, LN_FORMS, RMS_FORMS

FUSION = "regrouped_norm"
EPILOGUE_GEMM = torch.ops.norm_fusion.epilogue_gemm.default


@functools.lru_cache(maxsize=None)
def activation_patterns() -> list[tuple[str, bool, pm.PatternExpr]]:
    """(name, gated, pattern), traced once per dtype class like the norm forms."""
    patterns, seen = [], set()
    for forms, gated in ((GATED_FORMS, True), (ACTIVATION_FORMS, False)):
        for index, (name, fn) in enumerate(forms):
            for dtype_name, dtype in TRACE_DTYPES.items():
                def trace(fn=fn, dtype=dtype, gated=gated):
                    args = [torch.empty(4, 16, dtype=dtype) for _ in range(2 if gated else 1)]  # distinct inputs
                    return pm.gen_pattern(fn, args, pm.fwd_only)

                key = f"activation/{'gated' if gated else 'plain'}/{index}/{name}/{dtype_name}"
                pattern = _any_users(cached_pattern(key, trace))
                if (name, repr(pattern)) not in seen:
                    seen.add((name, repr(pattern)))
                    patterns.append((name, gated, pattern))
    return patterns


def _any_users(pattern):
    """The pattern with every intermediate node allowed more readers than the traced form had: in training the
    backward also reads act(gate) (for d up) and the activation's pieces. They stay computed from the
    pre-activations, which the rewritten graph then reads from the epilogue's stored copy (``aux``)."""
    stack = [pattern]
    while stack:
        p = stack.pop()
        if isinstance(p, pm._TargetExpr):
            p.users = pm.MULTIPLE
        stack.extend(a for a in (*getattr(p, "args", ()), *getattr(p, "kwargs", {}).values())
                     if isinstance(a, pm.PatternExpr))
    return pattern


def _model_shaped(mm: Node) -> Node:
    """The node holding a consumer's output in the model's shape: the mm itself or its only (view) user."""
    users = list(mm.users)
    if len(users) == 1 and users[0].target in VIEW_OPS:
        return users[0]
    return mm


def _first_downstream(start: list, found: Callable[[Node], object], forward: Callable[[Node], bool] = lambda n: True,
                      depth: int = 8):
    """The first non-None ``found(node)`` over the nodes reachable from ``start`` (breadth first, up to ``depth``
    levels, through the nodes ``forward`` admits), or None."""
    frontier, seen = list(start), set()
    for _depth in range(depth):
        nxt = []
        for node in frontier:
            if node in seen:
                continue
            seen.add(node)
            result = found(node)
            if result is not None:
                return result
            nxt.extend(u for u in node.users if forward(u))
        frontier = nxt
    return None


def _find_activation(pre: Node, forward: Callable[[Node], bool]):
    """(name, gated, match) of an activation whose input is ``pre``, searched a few nodes downstream. A gated
    pair is looked for first: its act(gate) alone matches the plain activation one node earlier."""
    def activation_at(node, want_gated):
        for name, gated, pattern in activation_patterns():
            if gated != want_gated:
                continue
            match = pattern.match(node)
            if pm.is_match(match) and pre in [match.kwargs.get(k) for k in (("gate", "up") if gated else ("z",))]:
                return name, gated, match
        return None

    for want_gated in (True, False):
        found = _first_downstream([u for u in pre.users if forward(u)], lambda n: activation_at(n, want_gated),
                                  forward)
        if found is not None:
            return found
    return None


# --- a per-head RMSNorm (QK-norm) and RoPE after a q/k projection ----------------------------------------------

@dataclasses.dataclass
class HeadNorm:
    """q_norm(proj(h).view(B, L, H, D)) found after a consumer, the norm before or after ``.transpose(1, 2)``
    (Qwen3, Gemma3), and the rotate-half RoPE after both where the model applies one; or that RoPE alone, straight
    after the view's transpose (Llama: ``weight`` None), or that RoPE followed by a per-head RMSNorm
    (``norm_after_rope``: NanoChat's without weight, HunYuan's with one). A rotation keeps each head's sum of
    squares, so norm(RoPE(x))·γ = n·(γ·cos) + rotate_half(n)·(γ·sin) with n = norm(x): the epilogue's norm takes a
    weight of ones and γ goes into the tables."""
    view: Node  # the [B, L, H, D] view of the projection's output (with output gates: the q half of it)
    weight: Optional[Node]  # [D] or [H, D] (a weight per head, Cohere's); None: no per-head norm (RoPE alone)
    eps: float | Node  # a 0-d graph input under dynamic shapes (Dynamo lifts the module's float)
    output: Node  # the node the epilogue's output replaces: the norm's output, or RoPE's
    nodes: frozenset  # every node from the view to ``output``
    transposed: bool  # ``output`` is [B, H, L, D] (the transpose came first, or RoPE after it)
    cos: Optional[Node] = None  # [B or 1, L, D] or [L, D]
    sin: Optional[Node] = None
    sin_negated: bool = False  # rotate_half written cat(x2, -x1) (NanoChat): the rotation by -θ, sin negated
    rope_interleaved: bool = False  # RoPE's pairs neighbouring columns (GPT-J's, Cohere's), not halves
    rope_complex: bool = False  # the pairs as complex numbers (Llama 4): ``cos`` the complex table, ``sin`` None
    rope_dim: int = 0  # RoPE over the first rope_dim dims of each head (its tables [.., rope_dim]); 0: all
    norm_after_rope: bool = False  # the per-head norm reads RoPE's output (its weight, if any, after the rotation)
    # the q projection's output gates (Qwen3-Next's: [B, L, H, 2D] chunked into q and gate): the node the
    # projection's odd heads replace; ``view`` is then the q half
    gate: Optional[Node] = None
    center: bool = False  # the per-head norm a LayerNorm without bias (Cohere's), not an RMSNorm

    @property
    def has_norm(self) -> bool:
        return self.weight is not None or self.norm_after_rope

    @property
    def kernel_rope_dim(self) -> int:
        """The kernel's ``rope_dim``: the rotated width where RoPE's pairs are halves of it (the kernel reads
        tables of that width and passes the other columns through); 0 for the whole head or neighbouring pairs,
        which tables padded with cos 1, sin 0 make partial."""
        return 0 if self.rope_interleaved else self.rope_dim

    @property
    def head_dim(self) -> int:
        return int(self.view.meta["val"].shape[-1])


@functools.lru_cache(maxsize=None)
def _head_norm_patterns(weighted: bool = True) -> list:
    """The RMSNorm forms of the pre-norm family with a weight (or, ``weighted`` False, without one), traced as the
    family traces them."""
    forms = {form: spec for form, spec in RMS_FORMS.items() if bool(spec[1]) == weighted}
    return [pattern for _, pattern in traced_norm_forms(forms)]


def _head_layer_norm_patterns() -> list:
    """The LayerNorm forms with a weight and no bias (the kernel's per-head LayerNorm has none), traced as the
    family traces them."""
    forms = {form: spec for form, spec in LN_FORMS.items() if len(spec[1]) == 1}
    return [pattern for _, pattern in traced_norm_forms(forms)]


def _find_head_norm(pre: Node, n: int, backward: frozenset | set = frozenset()) -> Optional[HeadNorm]:
    """A per-head RMSNorm of this consumer's output ``pre`` (its only reader a [B, L, H, D] view, H·D = n; or a
    [B, L, H, 2D] one chunked into each head's q and output gate, ``_gated_heads``), with the rotate-half RoPE
    after its transpose where the model applies one; None otherwise, or where any node in between is read
    elsewhere than by the ``backward`` nodes (the output would still be needed)."""
    views = [u for u in pre.users if u.target in VIEW_OPS]
    if len(pre.users) != 1 or len(views) != 1:
        return None
    view = views[0]
    shape = view.meta["val"].shape
    if len(shape) != 4 or any(isinstance(d, torch.SymInt) for d in shape[2:]) or shape[2] * shape[3] != n:
        return None  # B and L may be dynamic, not the heads
    gated = _gated_heads(view)
    gate, split_nodes = (gated[1], gated[2]) if gated else (None, ())
    if gated:
        view = gated[0]  # the q half: the per-head norm's input
        shape = view.meta["val"].shape
    if regrouped.head_dim_problem(int(shape[3])):  # left for the leftover report, which names the cause
        return None
    transposes = [u for u in view.users if _is_head_transpose(u)]
    norm_inputs = (view, *transposes[:1]) if len(view.users) == 1 else (view,)
    def norm_at(node):
        for center, patterns in ((False, _head_norm_patterns()), (True, _head_layer_norm_patterns())):
            for pattern in patterns:
                found = pattern.match(node)
                if pm.is_match(found) and found.kwargs.get("x") in norm_inputs and \
                        isinstance(found.kwargs.get("weight"), Node):
                    return found, center
        return None

    found = _first_downstream([view], norm_at)
    if found is None:
        return _rope_alone(view, backward) if gate is None else None
    match, center = found
    weight = match.kwargs["weight"]
    if tuple(weight.meta["val"].shape) not in ((shape[3],), (shape[2], shape[3])):  # [D], or [H, D] per head
        return None
    transposed = match.kwargs["x"] is not view
    eps = _eps(match)
    eps = float(eps) if isinstance(eps, (int, float)) else eps  # a 0-d graph tensor under dynamic shapes
    head = HeadNorm(view, weight, eps, match.output_node(),
                    frozenset([view, *split_nodes, *match.nodes, *(transposes[:1] if transposed else ())]),
                    transposed, gate=gate, center=center)
    _with_rope(head)
    return head if _read_only_inside(head, backward) else None


def _read_only_inside(head: HeadNorm, backward) -> bool:
    """Whether the nodes before ``head.output`` are read only by each other, by the ``backward`` nodes or as the
    output gates (else the projection's output would still be needed)."""
    inner = head.nodes - {head.output}
    return not any(u not in head.nodes and u is not head.gate and u not in backward
                   for node in inner for u in node.users)


def _gated_heads(view: Node) -> Optional[tuple]:
    """Qwen3-Next's and Qwen3.5's q projection: its [B, L, H, 2D] view chunked on the last dim into each head's q
    and its output gate, ``torch.chunk(q_proj(h).view(..., 2·D), 2, -1)``. (q, gate, the nodes from the view to
    q), q [B, L, H, D] (a view of it to the same shape, where the graph kept one); None otherwise."""
    W = int(view.meta["val"].shape[-1])
    split = _only_user(view)
    if split is None or W % 2 or split.target not in (aten.split.Tensor, aten.split_with_sizes.default):
        return None
    sizes = split.args[1] if split.target == aten.split_with_sizes.default else [split.args[1]] * 2
    dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
    if list(sizes) != [W // 2, W // 2] or dim not in (-1, 3):
        return None
    items = {u.args[1]: u for u in split.users if u.target is operator.getitem}
    if set(items) != {0, 1} or len(split.users) != 2:
        return None
    q, nodes = items[0], [view, split, items[0]]
    same = _only_user(q)
    if same is not None and same.target in VIEW_OPS and tuple(same.meta["val"].shape) == tuple(q.meta["val"].shape):
        q = same
        nodes.append(q)
    return q, items[1], nodes


def _rope_alone(view: Node, backward) -> Optional[HeadNorm]:
    """The RoPE of the projection's [B, L, H, D] view, right after its transpose (Llama's q and k) or before it
    (Llama 4's), with no per-head norm before it, as a HeadNorm without weight; None where there is none or its
    nodes are read elsewhere than by the ``backward`` nodes."""
    if len(view.users) != 1:
        return None
    head = HeadNorm(view, None, 0.0, view, frozenset([view]), transposed=False)
    _with_rope(head)
    if head.cos is None:
        return None
    rope_only = dataclasses.replace(head)
    _with_norm_after_rope(head)  # where RoPE's output is read elsewhere too, RoPE alone may still be taken
    return next((h for h in (head, rope_only) if _read_only_inside(h, backward)), None)


def _with_norm_after_rope(head: HeadNorm) -> None:
    """Extend ``head`` (RoPE alone) over a per-head RMSNorm of RoPE's output, its only reader, with a weight of
    the head's size or none."""
    rotated = head.output
    D = head.head_dim

    def norm_at(node, weighted):
        for pattern in _head_norm_patterns(weighted):
            found = pattern.match(node)
            if not pm.is_match(found) or found.kwargs.get("x") is not rotated:
                continue
            weight = found.kwargs.get("weight")
            if not weighted or isinstance(weight, Node) and tuple(weight.meta["val"].shape) == (D,):
                return found
        return None

    # the weighted form first: its weightless part matches too, nearer RoPE
    found = _first_downstream([rotated], lambda n: norm_at(n, True)) or \
        _first_downstream([rotated], lambda n: norm_at(n, False))
    # the epilogue writes the projection's dtype: a norm that leaves another (an fp32 result) is not taken
    if found is not None and found.output_node().meta["val"].dtype == rotated.meta["val"].dtype:
        eps = _eps(found)
        head.eps = float(eps) if isinstance(eps, (int, float)) else eps
        head.weight = found.kwargs.get("weight")
        head.norm_after_rope = True
        head.nodes = head.nodes | set(found.nodes)
        head.output = found.output_node()


def _same_size(a, b) -> bool:
    """a == b for sizes that may be symbolic, without a guard (a dynamic size is never specialized here)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(a == b))


def _is_head_transpose(node: Node) -> bool:
    return node.target == aten.permute.default and list(node.args[1]) == [0, 2, 1, 3]


def _with_rope(head: HeadNorm) -> None:
    """Extend ``head`` over ``x·cos + rotate_half(x)·sin`` as transformers writes it: on the [B, H, L, D] output
    (after ``.transpose(1, 2)`` where the norm came before it) with cos, sin [B|1, L, D] unsqueezed at dim 1 or
    [L, D]; or, where the norm came before the transpose, on its [B, L, H, D] output with the tables unsqueezed at
    dim 2 (Gemma 4: ``apply_rotary_pos_emb(q, cos, sin, unsqueeze_dim=2)``, then the transpose)."""
    normed = head.output
    if head.transposed:
        candidates = [(normed, (), 1)]
    else:
        users = list(normed.users)
        candidates = [(users[0], (users[0],), 1)] if len(users) == 1 and _is_head_transpose(users[0]) else []
        candidates.append((normed, (), 2))
    for t, extra, table_dim in candidates:
        found = _rope_of(t, head, table_dim)
        upcast = _upcast(t)
        if found is None and upcast is not None:  # computed in fp32, back to the 16-bit dtype (Cohere's)
            found = _rope_of(upcast, head, table_dim)
            back = _only_user(found.out) if found is not None else None
            if back is None or back.target != PRIMS_CONVERT or back.args[1] != t.meta["val"].dtype:
                found = None
            else:
                found = found._replace(out=back, nodes={*found.nodes, upcast, back})
        if found is not None:
            head.cos, head.sin = found.tables
            head.sin_negated, head.rope_interleaved, head.rope_complex = found.negated, found.interleaved, \
                found.complex
            head.rope_dim = found.rope_dim
            head.nodes = head.nodes | {*extra, *found.nodes}
            head.output = found.out
            head.transposed = table_dim == 1
            return


class RopeMatch(NamedTuple):
    """A RoPE found in the graph: its output node, its nodes, the tables it reads (cos, sin; the complex table and
    None for Llama 4's form) and its form."""
    out: Node
    nodes: set
    tables: tuple
    negated: bool = False  # rotate_half written cat(x2, -x1): the rotation by -θ
    interleaved: bool = False  # pairs of neighbouring columns, not halves
    complex: bool = False  # the pairs as complex numbers (interleaved too)
    rope_dim: int = 0  # rotated dims of each head (the first ones); 0: all


PRIMS_CONVERT = torch.ops.prims.convert_element_type.default


def _only_user(node: Node) -> Optional[Node]:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _upcast(t: Node) -> Optional[Node]:
    """``t``'s only reader where it converts a 16-bit ``t`` to fp32 (RoPE computed in fp32), else None."""
    u = _only_user(t)
    if u is None or u.target != PRIMS_CONVERT or u.args[1] != torch.float32:
        return None
    return u if t.meta["val"].dtype in (torch.float16, torch.bfloat16) else None


def _rope_of(t: Node, head: HeadNorm, table_dim: int, width: int = 0) -> Optional[RopeMatch]:
    """The RoPE of ``t`` (``head``'s [B, H, L, D] output for ``table_dim`` 1, its [B, L, H, D] one for 2, the dim
    its tables are unsqueezed at; ``width`` its last dim where it is a slice of the head), or None. Its rotation:
    rotate_half over the head's halves, over neighbouring pairs (GPT-J's rotate_every_two, Cohere's rotate_half:
    ``stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)``), as complex numbers (``_complex_rope_of``), or either
    of the first two over the first dims of each head only (``_partial_rope_of``)."""
    D = width or head.head_dim
    complex_form = None if width else _complex_rope_of(t, head, table_dim)
    if complex_form is not None:
        return complex_form
    if not width:
        partial = _partial_rope_of(t, head, table_dim)
        if partial is not None:
            return partial
    halves = _rotate_half_halves(t, D // 2)
    muls = [u for u in t.users if u.target == aten.mul.Tensor]
    if halves is None or len(muls) != 1:
        return None
    first, second, split_nodes, interleaved = halves
    if len(first.users) != 1 or len(second.users) != 1:
        return None
    # rotate_half: cat(-x2, x1) (transformers), or cat(x2, -x1) (NanoChat: the rotation by -θ, sin negated)
    negated = next(iter(first.users)).target == aten.neg.default
    neg, kept = (next(iter(first.users)), second) if negated else (next(iter(second.users)), first)
    if neg.target != aten.neg.default or len(neg.users) != 1:
        return None
    # interleaved: each member unsqueezed at a new last dim, the pairs concatenated there, then flattened
    members = [neg, kept] if not interleaved else [_stacked(neg), _stacked(kept)]
    if any(m is None for m in members):
        return None
    neg_m, kept_m = members
    cat = next(iter(neg_m.users))
    halves_in_order = [kept_m, neg_m] if negated else [neg_m, kept_m]
    dims = ((-1,), (4,)) if interleaved else ((-1,), (3,))
    if cat.target != aten.cat.default or list(cat.args[0]) != halves_in_order or cat.args[1:] not in dims:
        return None
    if len(cat.users) != 1 or next(iter(kept_m.users)) is not cat:
        return None
    rotated = cat
    if interleaved:  # the [..., D/2, 2] pairs back to [..., D]
        rotated = next(iter(cat.users))
        if rotated.target not in VIEW_OPS or len(rotated.users) != 1 or \
                tuple(rotated.meta["val"].shape) != tuple(t.meta["val"].shape):
            return None
    mul_sin, mul_cos = next(iter(rotated.users)), muls[0]
    if mul_sin.target != aten.mul.Tensor or len(mul_sin.users) != 1 or len(mul_cos.users) != 1:
        return None
    out = next(iter(mul_sin.users))
    if out.target != aten.add.Tensor or set(out.args) != {mul_cos, mul_sin} or out is not next(iter(mul_cos.users)):
        return None
    cos_u = next((a for a in mul_cos.args if a is not t), None)
    sin_u = next((a for a in mul_sin.args if a is not rotated), None)
    tables = tuple(_rope_table(u, head, table_dim, D) for u in (cos_u, sin_u))
    if None in tables:
        return None
    nodes = {*split_nodes, neg, cat, rotated, mul_sin, mul_cos, out, *(members if interleaved else ())}
    return RopeMatch(out, nodes, tables, negated, interleaved)


def _rope_table(u, head: HeadNorm, table_dim: int, width: int) -> Optional[Node]:
    """The table RoPE multiplies by, from the node ``u`` it reads: [B|1, L, width] unsqueezed at ``table_dim``; or,
    on [B, H, L, D], one that broadcasts over heads as it is, [L, width] or [1, L, width] (the consumer expands
    either to [B, L, width]); None for anything else."""
    if not isinstance(u, Node):
        return None
    B, L = head.view.meta["val"].shape[:2]
    shape = u.meta["val"].shape
    if len(shape) == 4:  # computed after its unsqueeze (GLM-4 slices and repeats it there): 1 at the heads' dim
        seq_dim = 2 if table_dim == 1 else 1
        fits = _same_size(shape[table_dim], 1) and (_same_size(shape[0], 1) or _same_size(shape[0], B)) and \
            _same_size(shape[seq_dim], L) and shape[-1] == width
        return u if fits else None
    unsqueezed = u.target == aten.unsqueeze.default and u.args[1] == table_dim
    table = u.args[0] if unsqueezed else u
    tshape = table.meta["val"].shape
    if table_dim == 2 and not unsqueezed:
        return None
    batch_ok = (_same_size(tshape[0], 1) or unsqueezed and _same_size(tshape[0], B)) if len(tshape) == 3 else \
        len(tshape) == 2 and not unsqueezed
    return table if batch_ok and _same_size(tshape[-2], L) and tshape[-1] == width else None


def _partial_rope_of(t: Node, head: HeadNorm, table_dim: int) -> Optional[RopeMatch]:
    """RoPE over the first R dims of each head, the rest passed through: ``cat((rope(t[..., :R]), t[..., R:]), -1)``
    (GLM-4's, GLM-4.5's, GPT-NeoX's). Where its pairs are neighbouring columns (GLM-4's) it is the whole head's
    RoPE with cos = 1 and sin = 0 past R (``RopeMatch.rope_dim``: the consumer pads the tables); where they are
    halves of the first R (GLM-4.5's: pairs (i, i + R/2)), the kernel's partial rotation (``HeadNorm.
    kernel_rope_dim``, tables [.., R]), which needs R a power of two: None otherwise."""
    D = head.head_dim
    slices = [u for u in t.users if u.target == aten.slice.Tensor and u.args[1] in (3, -1)
              and (len(u.args) < 5 or u.args[4] == 1)]
    if len(t.users) != 2 or len(slices) != 2:
        return None
    rot = next((u for u in slices if u.args[2] == 0), None)
    keep = next((u for u in slices if u is not rot), None)
    if rot is None or keep is None:
        return None
    R = int(rot.meta["val"].shape[-1])
    if not 0 < R < D or R % 2 or keep.args[2] != R or int(keep.meta["val"].shape[-1]) != D - R:
        return None
    inner = _rope_of(rot, head, table_dim, width=R)
    if inner is not None and not inner.interleaved and R & (R - 1):
        return None  # over halves: the kernel splits a head into groups of R columns, a power of two
    cat = _only_user(inner.out) if inner is not None else None
    if cat is None or cat.target != aten.cat.default or list(cat.args[0]) != [inner.out, keep] or \
            cat.args[1:] not in ((-1,), (3,)) or _only_user(keep) is not cat:
        return None
    return inner._replace(out=cat, nodes={*inner.nodes, rot, keep, cat}, rope_dim=R)


def _complex_rope_of(t: Node, head: HeadNorm, table_dim: int) -> Optional[RopeMatch]:
    """``_rope_of`` for RoPE as complex numbers (Llama 4's): view_as_real(view_as_complex(t.reshape(..., D/2, 2)) ·
    freqs[:, :, None, :]).flatten(3), freqs [B|1, L, D/2] complex. Each pair (t[2i], t[2i+1]) is one complex
    number, so it is the interleaved RoPE with cos, sin the real and imaginary parts of freqs (the table returned,
    with None for sin)."""
    D = head.head_dim
    pairs = _only_user(t)
    if pairs is None or pairs.target not in VIEW_OPS or tuple(pairs.meta["val"].shape[-2:]) != (D // 2, 2):
        return None
    cplx = _only_user(pairs)
    mul = _only_user(cplx) if cplx is not None and cplx.target == aten.view_as_complex.default else None
    if mul is None or mul.target != aten.mul.Tensor:
        return None
    real = _only_user(mul)
    out = _only_user(real) if real is not None and real.target == aten.view_as_real.default else None
    if out is None or out.target not in VIEW_OPS or tuple(out.meta["val"].shape) != tuple(t.meta["val"].shape):
        return None
    table = _rope_table(next((a for a in mul.args if a is not cplx), None), head, table_dim, D // 2)
    if table is None or not table.meta["val"].is_complex():
        return None
    return RopeMatch(out, {pairs, cplx, mul, real, out}, (table, None), interleaved=True, complex=True)


def _stacked(node: Node) -> Optional[Node]:
    """``node``'s only reader where it unsqueezes a new last dim (``torch.stack(..., -1)`` decomposed), else None."""
    u = _only_user(node)
    rank = len(node.meta["val"].shape)
    if u is None or u.target != aten.unsqueeze.default or u.args[1] not in (-1, rank) or len(u.users) != 1:
        return None
    return u


def _rotate_half_halves(t: Node, half: int) -> Optional[tuple]:
    """(first, second, nodes, interleaved) of the rotation's two members of ``t``'s last dim, where ``t``'s only
    other reader is the ``t·cos`` product: two slices (transformers' form), one split (``x.chunk(2, -1)``) and its
    getitems, or (interleaved) the even and odd columns, two slices with step 2."""
    slices = {(u.args[2], u.args[3], u.args[4] if len(u.args) > 4 else 1): u for u in t.users
              if u.target == aten.slice.Tensor and len(u.args) in (4, 5) and u.args[1] in (3, -1)}
    first = slices.get((0, half, 1))
    second = next((u for (start, _, step), u in slices.items() if start == half and step == 1), None)
    if first is not None and second is not None and len(t.users) == 3:
        return first, second, (first, second), False
    even = next((u for (start, _, step), u in slices.items() if start == 0 and step == 2), None)
    odd = next((u for (start, _, step), u in slices.items() if start == 1 and step == 2), None)
    if even is not None and odd is not None and len(t.users) == 3 and \
            even.meta["val"].shape[-1] == odd.meta["val"].shape[-1] == half:
        return even, odd, (even, odd), True
    splits = [u for u in t.users if u.target in (aten.split.Tensor, aten.split_with_sizes.default)
              and tuple(u.args[2:3] or (0,))[0] in (3, -1)
              and (u.args[1] == half or isinstance(u.args[1], (list, tuple)) and list(u.args[1]) == [half, half])]
    if len(splits) != 1 or len(t.users) != 2:
        return None
    items = {u.args[1]: u for u in splits[0].users if u.target is operator.getitem}
    if set(items) != {0, 1} or len(splits[0].users) != 2:
        return None
    return items[0], items[1], (splits[0], items[0], items[1]), False


# --- inserting traced torch code into the graph ------------------------------------------------------------------

def insert_traced(graph: Graph, fn: Callable, inputs: dict, before: Node, functional: bool = False) -> list[Node]:
    """Trace ``fn(**tensors)`` (absent inputs passed as None) with the graph's fake values and Inductor's
    decompositions, copy it in before ``before``, and return its output nodes. ``functional``: through
    functionalization, as a Triton launch (``wrap_triton``) must be traced for the graph, which is functional
    at this stage."""
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.functional_tensor import FunctionalTensorMode, dispatch_functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    names = [k for k, v in inputs.items() if v is not None]
    values = [inputs[k].meta["val"] for k in names]

    def flat(*tensors):
        kwargs = dict.fromkeys(inputs)
        kwargs.update(zip(names, tensors))
        return fn(**kwargs)

    fake_mode = torch._guards.detect_fake_mode(values)
    with fake_mode:
        traced = dispatch_functionalize(flat, FunctionalTensorMode()) if functional else flat
        gm = make_fx(traced, select_decomp_table(), tracing_mode="real")(*values)
    if any(n.op == "get_attr" for n in gm.graph.nodes):
        raise RuntimeError("the traced code holds tensor constants")
    with graph.inserting_before(before):
        outputs = graph.graph_copy(gm.graph, dict(zip(gm.graph.find_nodes(op="placeholder"),
                                                      [inputs[k] for k in names])))
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


# --- the consumers -----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Site:
    """A norm whose consumers were rewritten: what the producer link needs."""

    x: Node
    norm: str  # "rms" | "ln"
    eps: float | Node  # a 0-d graph tensor under dynamic shapes (Dynamo lifts the module's float)
    rstd: Node
    mean: Optional[Node]
    record: object  # report.SiteRecord
    normed: Optional[Node] = None  # the normalized output, when a later producer reads it as its residual
    gamma: Optional[Node] = None
    beta: Optional[Node] = None


@dataclasses.dataclass
class _Rewrite:
    consumers: list  # common.MatmulConsumer: one, or (gate, up)
    activation: str = "none"
    act_output: Optional[Node] = None  # the activation's output node, replaced by the op's output
    pre: list = dataclasses.field(default_factory=list)  # the consumers' outputs in the model's shape
    act_nodes: frozenset = frozenset()  # the matched activation's nodes
    head: Optional[HeadNorm] = None  # a per-head RMSNorm (and RoPE) after the consumer, in its epilogue

    @property
    def write_aux(self) -> bool:
        """The pre-activation, or a piece of the activation computed from it, is still read outside the
        activation (by the backward): the epilogue stores the pre-activation, and those readers recompute from it.
        The same for a per-head norm: its input (the projection's output), where the backward reads the norm."""
        if self.head is not None:  # (the output gates are the output's odd heads)
            inner = self.head.nodes - {self.head.output}
            return any(u not in self.head.nodes and u is not self.head.gate for n in (*self.pre, *inner)
                       for u in n.users)
        if self.activation == "none":
            return False
        inner = [n for n in self.act_nodes if n is not self.act_output]
        return any(u not in self.act_nodes for n in (*self.pre, *inner) for u in n.users)


def _stat_nodes(match: pm.Match) -> tuple[Optional[Node], Optional[Node]]:
    rstd = mean = None
    for node in match.nodes:
        if is_rsqrt(node):
            rstd = node
        elif is_row_mean(node):
            mean = node
    return rstd, mean


def _plan_rewrites(consumers, ctx) -> list[_Rewrite]:
    """Group the consumers into epilogue GEMMs: a gated pair where act(gate) · up reads two of them, else one
    each with the activation that follows it, if any."""
    def forward(n):
        return n not in ctx.backward and n.op != "output"

    by_pre = {_model_shaped(c.node): c for c in consumers}
    rewrites, used = [], set()
    for pre, c in by_pre.items():
        if c.node in used:
            continue
        found = _find_activation(pre, forward)
        if found is None:
            continue
        name, gated, match = found
        if gated:
            gate, up = match.kwargs["gate"], match.kwargs["up"]
            if gate not in by_pre or up not in by_pre or by_pre[gate].node in used or by_pre[up].node in used:
                continue
            cg, cu = by_pre[gate], by_pre[up]
            if cg.n != cu.n or cg.weight_kn != cu.weight_kn or cg.scale != cu.scale or gate is up:
                continue
            pair = [cg, cu]
        else:
            pair = [c]
        rewrites.append(_Rewrite(pair, name, match.output_node(), [_model_shaped(p.node) for p in pair],
                                 frozenset(match.nodes)))
        used.update(p.node for p in pair)
    for c in consumers:
        if c.node not in used:
            pre = _model_shaped(c.node)
            rewrites.append(_Rewrite([c], pre=[pre], head=_find_head_norm(pre, c.n, ctx.backward)))
    return rewrites


def _residual_add(user: Node, normed: Node) -> bool:
    """``user`` adds the normalized tensor to a matmul's output: a producer that can read it normalized."""
    if user.target != aten.add.Tensor or len(user.args) != 2 or normed not in user.args:
        return False
    found, _ = _producer(user)
    return found is not None and found[1] is normed


def inlined_unfused(node: Node, reader_ok) -> bool:
    """Whether Inductor, compiling the unfused graph, computes ``node`` inside the kernels that read it and never
    writes it: a pointwise result each of whose readers (through views) ``reader_ok`` accepts. A rewrite that
    makes a fused kernel produce it then saves none of its bytes: BERT's last residual sum, read only by its
    LayerNorm (one kernel in the unfused graph), must be written for an epilogue GEMM to read it."""
    if not _tagged(node, torch.Tag.pointwise):
        return False
    readers, stack = [], list(node.users)
    while stack:
        user = stack.pop()
        if user.target in VIEW_OPS:
            stack.extend(user.users)
        else:
            readers.append(user)
    return bool(readers) and all(reader_ok(u) for u in readers)


def fusable_reader(node: Node) -> bool:
    """A pointwise op or a reduction: Inductor inlines a pointwise producer into its kernel."""
    return _tagged(node, torch.Tag.pointwise) or _tagged(node, getattr(torch.Tag, "reduction", None))


def _tagged(node: Node, tag) -> bool:
    return (tag is not None and node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and tag in node.target.tags)


def unserved_readers(normed: Node, others: list) -> list:
    """The normalized tensor's other forward readers that cannot normalize it on load (all but the residual adds
    of a matmul's output): if any, ``rewrite_consumers`` declines the site because of them."""
    return [u for u in others if not _residual_add(u, normed)]


def rewrite_consumers(spec, match: pm.Match, x: Node, gamma, beta, eps, consumers: list, others: list, site,
                      ctx) -> Optional[str]:
    """Rewrite the norm's matmul consumers into epilogue GEMMs; None if done, else why not (the site then stays
    unfused). ``others``: the normalized tensor's other forward readers; each
    must be a residual add of a matmul's output, which the producer link makes normalize on load."""
    from norm_fusion_inductor.selection import choose_epilogue_gemm

    normed = match.output_node()
    unserved = unserved_readers(normed, others)
    if unserved:
        return also_read_reason(unserved)
    x_val = x.meta["val"]
    why = _dynamic_rejection(x_val.shape)
    if why is not None:
        return why
    rstd, mean = _stat_nodes(match)
    if rstd is None or (spec.norm == "ln" and mean is None):
        return "the norm's statistics are not separate nodes of the graph"
    K = x_val.shape[-1]
    M = size_hint(x_val.numel() // K)  # dynamic M: timed at the size the graph was traced with
    backward_reads = backward_reads_normed(normed, ctx)
    rewrites = _plan_rewrites(consumers, ctx)
    # the normalized tensor's write is saved once no reader is left: residual adds that also read it (post-norm
    # blocks, BERT) keep it written unless the producer link later normalizes it on load, and that rewrite then
    # counts the write; the consumers count none of it. Where the unfused graph never writes x (a sum read only by
    # this norm: one Inductor kernel), the epilogue GEMMs need x written instead: bytes moved, not saved
    norm_nodes = set(match.nodes)
    x_inlined = inlined_unfused(x, lambda u: u in norm_nodes)
    norm_share = 0 if others or x_inlined else M * K * x_val.element_size() // max(len(rewrites), 1)
    choices = []
    for rw in rewrites:
        c = rw.consumers[0]
        aux = rw.write_aux
        n = c.n * len(rw.consumers)
        for node in rw.pre + ([rw.act_output] if rw.act_output is not None else []):
            why = _dynamic_rejection(node.meta["val"].shape)
            if why is not None:
                return why
        folds = gamma is not None or c.scale != 1.0 or len(rw.consumers) == 2
        # weight-sized passes of the operands per call: one kernel reads W and writes W·γ (u and v from the same
        # read: kernels.weight_fold), or only reads W for u and v
        passes = 2 if folds else int(spec.norm == "ln" or beta is not None)
        sources, fold_note = _weight_sources(rw, gamma, beta, ctx) if passes else (None, "")

        def choose(fold_passes):
            return choose_epilogue_gemm(M, n, K, x_val.dtype, x_val.device, row_norm=spec.norm,
                                        activation=rw.activation, write_aux=aux, stats="none", residual=False,
                                        w_kn=c.weight_kn, norm_bytes=norm_share, config=ctx.config,
                                        fold_bytes=fold_passes * n * K * x_val.element_size(),
                                        head_dim=rw.head.head_dim if rw.head else 0,
                                        rope=bool(rw.head and rw.head.cos is not None),
                                        rope_interleaved=bool(rw.head and rw.head.rope_interleaved),
                                        rope_dim=rw.head.kernel_rope_dim if rw.head else 0,
                                        head_gates=bool(rw.head and rw.head.gate is not None),
                                        head_center=bool(rw.head and rw.head.center),
                                        head_norm=bool(rw.head is None or rw.head.has_norm),
                                        direct_launch=_direct_launch(ctx, x_val, *rw.pre),
                                        backward_reads_norm=backward_reads,
                                        activation_written=rw.act_output is None
                                        or not inlined_unfused(rw.act_output, fusable_reader))

        def pick(sources, fold_note):
            if sources is not None and torch._inductor.config.freezing:  # parameters are constants: Inductor
                return choose(0), None, "W·γ folded once (Inductor's freezing)"  # folds W·γ once
            return choose_fold(choose, passes, sources, fold_note)

        offered = sources, fold_note
        choice, sources, fold_note = pick(*offered)
        with_rope = None
        if not choice.fused and rw.head is not None and not rw.head.has_norm:
            # RoPE alone did not pay in this GEMM: the projection without it (RoPE stays Inductor's)
            rw.head, aux, with_rope = None, False, choice.reason
            choice, sources, fold_note = pick(*offered)
        if not choice.fused:
            return choice.reason + (f"; with RoPE in the epilogue: {with_rope}" if with_rope else "")
        choices.append((rw, aux, choice, sources, fold_note))
    graph = x.graph
    try:
        for rw, aux, choice, sources, _ in choices:
            _insert_consumer(graph, spec.norm, rw, aux, x, rstd, mean, gamma, beta, K, choice, sources)
            if rw.head is not None:  # its nodes left for the backward are this site's, not a norm of their own
                ctx.covered.update(rw.head.nodes)
    except Exception as e:  # never an exception in the user's compile (a partial rewrite is still consistent)
        return f"the rewrite failed ({type(e).__name__}: {e})"
    eps = float(eps) if isinstance(eps, (int, float)) else eps
    ctx.regrouped_sites.append(Site(x, spec.norm, eps, rstd, mean, site, normed if others else None, gamma,
                                    beta))
    acts = sorted({rw.activation for rw in rewrites if rw.activation != "none"})
    acts += sorted({_head_piece(rw.head) for rw in rewrites if rw.head})
    return _accepted(site, ctx, rewrites, acts, choices)


def _head_piece(head: HeadNorm) -> str:
    """How the log names a q/k projection's per-head epilogue piece."""
    if not head.has_norm:
        return "RoPE"
    if head.norm_after_rope:
        return "RoPE + QK-norm"
    norm = "LayerNorm QK-norm" if head.center else "QK-norm"
    return f"{norm} + RoPE" if head.cos is not None else norm


def _accepted(site, ctx, rewrites, acts, choices) -> None:
    n = sum(len(rw.consumers) for rw in rewrites)
    reason = f"{n} matmul(s) read the stream with the norm in their epilogue"
    if acts:
        reason += " (" + ", ".join(a if a.startswith(("QK-norm", "RoPE")) else f"activation {a}" for a in acts)
        reason += " in the epilogue too)"
    reason += "; " + "; ".join(sorted({ch.reason for _, _, ch, _, _ in choices}))
    notes = sorted({note for *_, note in choices if note})
    if notes:
        reason += "; " + "; ".join(notes)
    site.fusion = FUSION
    ctx.accept(site, choices[0][2].implementation, reason)
    return None


def _dynamic_rejection(shape) -> Optional[str]:
    """Why a tensor of this shape cannot be rewritten under dynamic shapes, or None: K and N (the last dim) must
    be static, the GEMM's tiles and weights depend on them."""
    if len(shape) and isinstance(shape[-1], torch.SymInt):
        return "a dynamic last dim (the GEMM's K or N)"
    return None


def _view_shape(shape) -> list:
    """The shape for ``view``: one dynamic dim as -1; several as the symbolic sizes themselves, which the trace
    reads from its inputs' sizes (``insert_traced`` raises where no input carries them: the site stays
    unfused)."""
    dynamic = sum(isinstance(d, torch.SymInt) for d in shape)
    if dynamic > 1:
        return list(shape)
    return [-1 if isinstance(d, torch.SymInt) else int(d) for d in shape]


def _direct_launch(ctx, *values) -> bool:
    """Whether the GEMM's launch can be traced into the graph: launch "direct", a GPU, and shapes the traced code
    serves (static, or one dynamic leading dim: M, which the launch reads from its input without a guard)."""
    values = [v.meta["val"] if isinstance(v, Node) else v for v in values]
    return (ctx.config.launch == "direct" and values[0].device.type == "cuda"
            and all(_dynamic_rejection(v.shape) is None for v in values))


def _backend(choice) -> str:
    """The op's GEMM backend for a choice of selection.choose_epilogue_gemm."""
    return "quack" if choice.implementation == Implementation.REGROUPED_QUACK else "triton"


def _insert_consumer(graph, norm, rw: _Rewrite, aux: bool, x, rstd, mean, gamma, beta, K, choice,
                     sources: Optional[list]) -> None:
    """Replace the consumers (and their activation) by one epilogue GEMM. ``sources``: the parameters the
    weight-side operands are computed from, when they are kept folded between calls (inference), else None."""
    backend, config = _backend(choice), regrouped.launch_config(choice)
    gemm = regrouped.gemm_call(config)
    consumers = rw.consumers
    c0 = consumers[0]
    scale_c, w_kn = c0.scale, c0.weight_kn
    N = c0.n
    pre_shape = _view_shape(rw.pre[0].meta["val"].shape)
    out_shape = _view_shape(rw.act_output.meta["val"].shape) if rw.act_output is not None else pre_shape
    gated = len(consumers) == 2
    head = rw.head
    keep_layout = False
    if head is not None:  # B and L may be symbolic: the trace reads them from its inputs' sizes
        B, L, H, D = head.view.meta["val"].shape
        # a partial RoPE's output (its cat) is a contiguous [B, H, L, D]; under dynamic shapes the epilogue's
        # transposed view in its place crashed the backward (Inductor asserted the attention output's strides with
        # L baked in: fuzz_models seed 2026120509, case 1), so the output is given that layout there (a copy)
        keep_layout = head.transposed and bool(head.rope_dim) and any(isinstance(d, torch.SymInt) for d in (B, L))

    def consumer(x, rstd, mean, gamma, beta, w0, w1, b0, b1, head_weight=None, cos=None, sin=None, head_eps=None,
                 **params):
        a = x.reshape(-1, K)
        g = gamma.float() * scale_c if gamma is not None else None
        if g is None and scale_c != 1.0:
            g = torch.full((K,), scale_c, device=x.device, dtype=torch.float32)
        bt = beta.float() * scale_c if beta is not None else None
        scale = rstd.reshape(-1).float()
        shift = (rstd * mean).reshape(-1).float() if norm == "ln" else None
        activation, on = rw.activation, dict(backend=backend)
        if head is not None:  # q/k: the per-head norm and RoPE too (Triton only: Quack has no such piece)
            if head.rope_complex:  # freqs [.., D/2] complex: its real and imaginary parts, once per pair member
                parts = torch.view_as_real(cos)
                cos, sin = (parts[..., i].repeat_interleave(2, -1) for i in (0, 1))
            if head.rope_dim and not head.kernel_rope_dim:  # neighbouring pairs: the dims past it pass through
                pad = D - head.rope_dim  # as cos 1, sin 0 there (over halves the kernel reads [.., rope_dim])
                cos = torch.cat([cos, cos.new_ones(*cos.shape[:-1], pad)], -1)
                sin = torch.cat([sin, sin.new_zeros(*sin.shape[:-1], pad)], -1)
            if head.sin_negated:
                sin = torch.neg(sin)
            if head.norm_after_rope:  # γ·RoPE(n) = n·(γ·cos) + rotate_half(n)·(γ·sin): γ into the tables
                if head_weight is not None:
                    cos, sin = ((t.float() * head_weight.float()).to(t.dtype) for t in (cos, sin))
                head_weight = torch.ones(D, device=x.device, dtype=x.dtype)
            squeeze = 1 if head.transposed else 2  # a 4-D table: 1 at the heads' dim
            width = head.kernel_rope_dim or D
            tables = [(t.squeeze(squeeze) if t.dim() == 4 else t).expand(B, L, width).reshape(B * L, width)
                      if t is not None else None for t in (cos, sin)]
            activation, on = "none", dict(backend="triton", head_dim=D, head_weight=head_weight, rope_cos=tables[0],
                                          rope_sin=tables[1], rope_interleaved=head.rope_interleaved,
                                          rope_dim=head.kernel_rope_dim, head_gates=head.gate is not None,
                                          head_center=head.center)
            if head_eps is None:
                on["head_eps"] = head.eps
            else:  # a graph input (dynamic shapes): the kernel reads it
                on["head_eps_tensor"] = head_eps
        if params:  # W·γ kept between calls, inside the op call (the GEMM is an op whenever the fold is kept)
            out, aux_out, _ = torch.ops.norm_fusion.folded_epilogue_gemm(
                a, w0, w1, g, bt, b0, b1, [params[k] for k in sorted(params)], scale, shift, norm, activation, aux,
                w_kn, **on)
        else:
            w, u, v = regrouped.fold_operands(w0, w1, g, bt, b0, b1, w_kn, norm == "ln")
            out, aux_out, _ = gemm(a, w, v, None, scale, shift, u, norm, activation, aux, "none", w_kn, **on)
        if head is None:
            results = [out.view(out_shape)]
        else:  # the model's [B, H, L, D] view (or [B, L, H, D]); with output gates, the q half of [B, L, H, 2D]
            out_all = out
            out = out.view(B, L, H, 2 * D)[..., :D] if head.gate is not None else out.view(B, L, H, D)
            out = out.permute(0, 2, 1, 3) if head.transposed else out
            results = [out.contiguous() if keep_layout else out]
        if aux:
            if gated:
                pairs = aux_out.view(-1, N, 2)
                results += [pairs[..., 0].reshape(pre_shape), pairs[..., 1].reshape(pre_shape)]
            else:
                results.append(aux_out.view(pre_shape))
        if head is not None and head.gate is not None:  # the gates: the odd heads, as the projection wrote them
            results.append(out_all.view(B, L, H, 2 * D)[..., D:])
        return tuple(results)

    w_nodes = [c.weight for c in consumers] + [None] * (2 - len(consumers))
    b_nodes = [c.bias for c in consumers] + [None] * (2 - len(consumers))
    first = min((c.node for c in consumers), key=lambda n: _position(graph, n))
    if head is not None:  # RoPE's tables may be computed after the projection: insert where they exist
        first = head.output
    inputs = dict(x=x, rstd=rstd, mean=mean if norm == "ln" else None, gamma=gamma, beta=beta, w0=w_nodes[0],
                  w1=w_nodes[1], b0=b_nodes[0], b1=b_nodes[1])
    if head is not None:
        inputs.update(head_weight=head.weight, cos=head.cos, sin=head.sin,
                      head_eps=head.eps if isinstance(head.eps, Node) else None)
    inputs.update({f"param{i:03d}": node for i, node in enumerate(sources or ())})
    # a direct launch (the GEMM's, or on the GPU the weight fold's: kernels.weight_fold) is traced functionally
    functional = config is not None or x.meta["val"].is_cuda
    outputs = insert_traced(graph, consumer, inputs, before=first, functional=functional)
    replaced = rw.act_output if rw.act_output is not None else rw.pre[0]
    if head is not None:
        replaced = head.output
    replaced.replace_all_uses_with(outputs[0])
    if aux:
        for pre, value in zip(rw.pre, outputs[1:]):
            pre.replace_all_uses_with(value)
    if head is not None and head.gate is not None:
        head.gate.replace_all_uses_with(outputs[-1])
        graph.erase_node(head.gate)
    if aux and head is not None:  # the norm's nodes the backward reads now read aux, inserted after them: move
        order = {n: i for i, n in enumerate(graph.nodes)}  # them after it, in their order
        last = max(outputs, key=order.__getitem__)
        for node in sorted((n for n in head.nodes if n is not replaced), key=order.__getitem__):
            last.append(node)
            last = node
    _erase_dead_chain(graph, replaced)  # the raw matmul, its view and the activation, if nothing else reads them


def choose_fold(choose: Callable, passes: int, sources: Optional[list], note: str) -> tuple:
    """(choice, sources, note): how a consumer's W·γ is computed, with the GEMM's choice. ``choose(passes)``
    chooses the GEMM with that many weight-sized passes per call; ``sources`` (not None) offers the fold cache
    (``folded_epilogue_gemm``: the GEMM as an op that keeps W·γ between calls), which costs no GPU time per call
    but is an op call per step. A GEMM launched directly has no Python per step, so the cache's host time would
    show in a step as short as that GEMM: it folds in the graph instead (one kernel Inductor fuses, priced by
    ``choose``)."""
    if sources is None:
        return choose(passes), None, note
    choice = choose(0)
    if regrouped.launch_config(choice) is None:
        return choice, sources, note
    per_call = choose(passes)
    if regrouped.launch_config(per_call) is None:  # the fold's cost decides: the op path (cache), or unfused
        return per_call, sources, note
    return per_call, None, "W·γ folded per call (launched directly: no op call per step)"


def _weight_sources(rw: _Rewrite, gamma, beta, ctx) -> tuple[Optional[list], str]:
    """The parameters and buffers that a consumer's weight-side operands (W, γ, β, biases) are computed from,
    and a note for the log; None where they are recomputed per call: in training (the weights change every
    step), under CUDA graphs (a replayed graph runs no Python to check them), with the option off, or where an
    operand depends on a graph input that is not a parameter or on a random op."""
    if not ctx.config.cache_folded_weights:
        return None, "W·γ folded per call (cache_folded_weights=False)"
    if ctx.backward or torch._inductor.config.triton.cudagraphs:
        return None, "W·γ folded per call (" + ("training" if ctx.backward else "CUDA graphs") + ")"
    static = ctx.static_inputs
    if static is None:
        return None, "W·γ folded per call (the graph does not say which inputs are parameters)"
    weights = [c.weight for c in rw.consumers]
    roots = weights + [c.bias for c in rw.consumers] + [gamma, beta]
    sources, seen, stack = [], set(), [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "placeholder":
            if node not in static:
                return None, f"W·γ folded per call (computed from the graph input {node.name}, not a parameter)"
            sources.append(node)
        elif node.op == "call_function" and not (isinstance(node.target, torch._ops.OpOverload)
                                                 and torch.Tag.nondeterministic_seeded in node.target.tags):
            stack.extend(node.all_input_nodes)
        else:
            return None, f"W·γ folded per call ({node.name} is not a function of the parameters)"
    mb = sum(w.meta["val"].numel() * w.meta["val"].element_size() for w in weights) / 1e6
    return sorted(sources, key=lambda n: n.name), f"W·γ kept folded between calls (+{mb:.1f} MB)"


def _position(graph: Graph, node: Node) -> int:
    for i, n in enumerate(graph.nodes):
        if n is node:
            return i
    return -1


def _erase_dead_chain(graph: Graph, node: Node) -> None:
    """Erase ``node`` and then every producer it leaves without users, down to the graph inputs."""
    stack, erased = [node], set()
    while stack:
        n = stack.pop()
        if n in erased or n.op != "call_function" or n.users:
            continue
        inputs = list(n.all_input_nodes)
        graph.erase_node(n)
        erased.add(n)
        stack.extend(inputs)


# --- the producers -----------------------------------------------------------------------------------------------

def _producer(x: Node):
    """(consumer, residual) when ``x = view(a @ Wᵀ (+ b)) + residual`` (either order), else (None, reason)."""
    if x.target != aten.add.Tensor or len(x.args) != 2 or x.kwargs:
        return None, "the stream is not a matmul plus a residual"
    for mm_side, residual in ((x.args[0], x.args[1]), (x.args[1], x.args[0])):
        if not isinstance(mm_side, Node) or not isinstance(residual, Node):
            continue
        mm = mm_side.args[0] if mm_side.target in VIEW_OPS else mm_side
        if not isinstance(mm, Node) or mm.target not in (aten.mm.default, aten.addmm.default):
            continue
        consumer = as_matmul_consumer(mm, mm.args[0] if mm.target == aten.mm.default else mm.args[1])
        if consumer is None:
            continue
        if len(mm.users) != 1 or (mm_side is not mm and len(mm_side.users) != 1):
            return None, "the matmul's output is read before the residual add"
        r_val, x_val = residual.meta["val"], x.meta["val"]
        if tuple(r_val.shape) != tuple(x_val.shape) or r_val.dtype != x_val.dtype:
            return None, "the residual is broadcast or of another dtype"
        if mm.meta["val"].dtype != x_val.dtype:
            return None, "the matmul's dtype differs from the stream's"
        return (consumer, residual), None
    return None, "the stream is not a matmul plus a residual"


def apply(graph: Graph, ctx) -> None:
    """The producer link, after the norm families rewrote their consumers: each such norm's stream, if a GEMM
    plus a residual produced it, comes from one epilogue GEMM with its partial statistics."""
    from norm_fusion_inductor.selection import choose_epilogue_gemm

    by_normed = {s.normed: s for s in ctx.regrouped_sites if s.normed is not None}
    for site in ctx.regrouped_sites:
        found, why = _producer(site.x)
        if found is None:
            site.record.reason += f"; statistics from Inductor's reduction ({why})"
            continue
        consumer, residual = found
        x_val = site.x.meta["val"]
        N = x_val.shape[-1]
        M = size_hint(x_val.numel() // N)
        a_val = consumer.node.args[0 if consumer.node.target == aten.mm.default else 1].meta["val"]
        normalized_from = by_normed.get(residual)
        choice = choose_epilogue_gemm(M, N, a_val.shape[1], x_val.dtype, x_val.device, row_norm="none",
                                      activation="none", write_aux=False, stats=site.norm, residual=True,
                                      w_kn=consumer.weight_kn, norm_bytes=M * N * x_val.element_size(),
                                      config=ctx.config, direct_launch=_direct_launch(ctx, x_val),
                                      residual_norm=normalized_from.norm if normalized_from is not None else "none",
                                      backward_reads_norm=normalized_from is not None
                                      and backward_reads_normed(normalized_from.normed, ctx))
        if not choice.fused:
            site.record.reason += f"; statistics from Inductor's reduction (producer GEMM: {choice.reason})"
            continue
        try:
            _insert_producer(graph, site, consumer, residual, normalized_from, choice)
        except Exception as e:  # never an exception in the user's compile: the trace fails before any change
            site.record.reason += f"; statistics from Inductor's reduction (the producer's rewrite failed: " \
                                  f"{type(e).__name__}: {e})"
            continue
        site.record.reason += f"; producer GEMM writes the stream and its row statistics ({choice.reason})"
        if normalized_from is not None:
            site.record.reason += "; it reads its residual, the previous norm's output, normalized on load"


def _insert_producer(graph: Graph, site: Site, consumer, residual: Node, normalized_from: Optional[Site],
                     choice) -> None:
    """``normalized_from``: the residual is that site's normalized output; read its input and normalize it on
    load instead."""
    backend, config = _backend(choice), regrouped.launch_config(choice)
    gemm = regrouped.gemm_call(config)
    mm = consumer.node
    a = mm.args[0] if mm.target == aten.mm.default else mm.args[1]
    x_shape = _view_shape(site.x.meta["val"].shape)
    N = x_shape[-1]
    stat_shape = _view_shape(site.rstd.meta["val"].shape)
    norm, eps, w_kn = site.norm, site.eps, consumer.weight_kn
    residual_norm = normalized_from.norm if normalized_from is not None else "none"

    def producer(a, w, bias, residual, r_rstd, r_mean, r_gamma, r_beta, eps_tensor=None):
        r = residual.reshape(-1, N).contiguous()
        r_scale = r_rstd.reshape(-1).float() if r_rstd is not None else None
        r_shift = (r_rstd * r_mean).reshape(-1).float() if r_mean is not None else None
        z, _, partials = gemm(a, w, bias, r, None, None, None, "none", "none", False, norm, w_kn, residual_norm,
                              r_scale, r_shift, r_gamma, r_beta, backend)
        rstd, mean = regrouped.finish_stats(partials, N, eps if eps_tensor is None else eps_tensor, norm)
        results = [z.view(x_shape), rstd.view(stat_shape)]
        if mean is not None:
            results.append(mean.view(stat_shape))
        return tuple(results)

    inputs = dict(a=a, w=consumer.weight, bias=consumer.bias, residual=residual, r_rstd=None, r_mean=None,
                  r_gamma=None, r_beta=None, eps_tensor=eps if isinstance(eps, Node) else None)
    if normalized_from is not None:
        src = normalized_from
        inputs.update(residual=src.x, r_rstd=src.rstd, r_mean=src.mean if src.norm == "ln" else None,
                      r_gamma=src.gamma, r_beta=src.beta)
    outputs = insert_traced(graph, producer, inputs, before=site.x, functional=config is not None)
    site.x.replace_all_uses_with(outputs[0])
    site.rstd.replace_all_uses_with(outputs[1])
    if site.mean is not None:
        site.mean.replace_all_uses_with(outputs[2])
    _erase_dead_chain(graph, site.x)
    # later links (a producer that reads this stream normalized) use the new nodes
    site.x, site.rstd = outputs[0], outputs[1]
    if site.mean is not None:
        site.mean = outputs[2]
