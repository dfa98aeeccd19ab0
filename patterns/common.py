"""Shared pieces of the pattern families: tracing norm forms into patterns, finding the matmuls that consume a
normalized tensor, and inserting nodes with fake values.

Patterns are traced from eager code with Inductor's own decompositions (``gen_pattern`` + ``fwd_only``), so they
meet the graph the way Inductor lowers it. Every intermediate node may have extra users: in a training graph the
backward reads the norm's intermediates, and a matched site decides for itself whether those users are served.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from typing import Callable, Iterable, Optional

import torch
from torch._inductor import pattern_matcher as pm
from torch.fx import Graph, Node

aten = torch.ops.aten

VIEW_OPS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)


def trace_pattern(search_fn: Callable, example_inputs: list, scalar_workaround: dict) -> pm.PatternExpr:
    """Pattern of ``search_fn`` as Inductor decomposes it, with every intermediate allowed extra users."""
    pattern = pm.gen_pattern(search_fn, example_inputs, _trace_functional, scalar_workaround)
    _allow_extra_users(pattern)
    return pattern


def _trace_functional(fn: Callable, args, **kwargs) -> torch.fx.GraphModule:
    """``fwd_only``, with in-place aten ops swapped for their functional forms: some decompositions use them
    (F.rms_norm's ``add_``), and AOTAutograd's functionalization removes them before our pass sees the graph.
    Only valid for patterns whose in-place ops write fresh intermediates, as norms do."""
    gm = pm.fwd_only(fn, args, **kwargs)
    for node in gm.graph.nodes:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target._schema.name.endswith("_"):
            packet = getattr(aten, target._schema.name.split("::")[-1][:-1], None)
            if packet is not None and hasattr(packet, target._overloadname):
                node.target = getattr(packet, target._overloadname)
    gm.recompile()
    return gm


def _allow_extra_users(pattern: pm.PatternExpr) -> None:
    seen = set()
    stack = [pattern]
    while stack:
        p = stack.pop()
        if id(p) in seen:
            continue
        seen.add(id(p))
        if isinstance(p, pm._TargetArgsExpr):
            p.users = pm.MULTIPLE
            stack.extend(a for a in p.flat_args_kwargs[0] if isinstance(a, pm.PatternExpr))


@dataclasses.dataclass
class MatmulConsumer:
    """A matmul that reads the normalized tensor as its A operand: ``out[M, N] = a[M, K] @ W[N, K]ᵀ (+ bias)``."""

    node: Node  # the mm / addmm node
    weight: Node  # W [N, K]
    bias: Optional[Node]


def _is_transpose_of_2d(node: Node) -> Optional[Node]:
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    if node.target == aten.permute.default and list(node.args[1]) in ([1, 0], [-1, -2], [-1, 0], [1, -2]):
        src = node.args[0]
    elif node.target in (aten.t.default,) or (node.target == aten.transpose.int and len(node.args[0].meta["val"].shape) == 2):
        src = node.args[0]
    else:
        return None
    return src if isinstance(src, Node) and len(src.meta["val"].shape) == 2 else None


def as_matmul_consumer(node: Node, a_operand: Node) -> Optional[MatmulConsumer]:
    """``node`` as ``a_operand @ Wᵀ (+ bias)`` with W [N, K] stored row-major, else None."""
    if node.op != "call_function":
        return None
    if node.target == aten.mm.default and node.args[0] is a_operand:
        weight = _is_transpose_of_2d(node.args[1])
        return MatmulConsumer(node, weight, None) if weight is not None else None
    if node.target == aten.addmm.default and node.args[1] is a_operand and not node.kwargs:
        weight = _is_transpose_of_2d(node.args[2])
        bias = node.args[0]
        if weight is None or not isinstance(bias, Node):
            return None
        n = weight.meta["val"].shape[0]
        if tuple(bias.meta["val"].shape) not in ((n,),):
            return None
        return MatmulConsumer(node, weight, bias)
    return None


def flattened_users(normed: Node) -> Iterable[tuple[Node, Node]]:
    """(user, operand) pairs: users of ``normed`` and of its [M, K] flattening views (3-D inputs)."""
    K = normed.meta["val"].shape[-1]
    for user in normed.users:
        if user.target in VIEW_OPS and _is_row_flatten(user, K):
            for inner in user.users:
                yield inner, user
        else:
            yield user, normed


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


def insert_call(graph: Graph, target, args: tuple, before: Node) -> Node:
    """Insert ``target(*args)`` before ``before`` and give it a fake value, as Inductor's passes expect."""
    with graph.inserting_before(before):
        node = graph.call_function(target, args)
    vals = [a.meta["val"] for a in args if isinstance(a, Node)]
    fake_mode = torch._guards.detect_fake_mode(vals)
    fake_args = tuple(a.meta["val"] if isinstance(a, Node) else a for a in args)
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        node.meta["val"] = target(*fake_args)
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
