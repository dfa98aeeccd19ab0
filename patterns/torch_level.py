"""Helpers for matching the torch-level graph of the pre-grad stage (Dynamo's FX graph: torch functions, Tensor
methods, Python operators), for the pre-grad family (norm → attention → norm)."""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F
from torch.fx import Node

ADD = (operator.add, torch.add, torch.Tensor.add)
MUL = (operator.mul, torch.mul, torch.Tensor.mul)
DIV = (operator.truediv, torch.div, torch.true_divide, torch.Tensor.div)
MATMUL = (operator.matmul, torch.matmul, torch.bmm)
LAYER_NORM = (F.layer_norm, torch.layer_norm)
RMS_NORM = (F.rms_norm, torch.rms_norm)
SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)


class Reject(Exception):
    """Not this block, or a variant the op does not take: the message says which."""


def is_call(node, functions=(), methods=()) -> bool:
    if not isinstance(node, Node):
        return False
    if node.op == "call_function":
        return node.target in functions
    return node.op == "call_method" and node.target in methods


def arg(node: Node, index: int, name: str, default=None):
    """Argument of a call by position or keyword. For call_method, position 0 is the tensor itself."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def value(node):
    return node.meta.get("example_value", node.meta.get("val")) if isinstance(node, Node) else None


def shape(node) -> tuple:
    return tuple(value(node).shape)


def skip_contiguous(node: Node, internal: list) -> Node:
    while is_call(node, methods=("contiguous",)):
        internal.append(node)
        node = node.args[0]
    return node


def is_view(node) -> bool:
    return is_call(node, (torch.reshape,), ("view", "reshape"))


def swaps_dims_1_2(node) -> bool:
    """transpose(1, 2) / permute(0, 2, 1, 3) of a 4-D tensor."""
    if is_call(node, (torch.transpose,), ("transpose",)):
        dims = {d % 4 for d in node.args[1:3]}
        return len(node.args) >= 3 and dims == {1, 2}
    if is_call(node, (torch.permute,), ("permute",)):
        dims = node.args[1] if len(node.args) == 2 and isinstance(node.args[1], (tuple, list)) else node.args[1:]
        return [d % 4 for d in dims] == [0, 2, 1, 3]
    return False


def swaps_last_two(node) -> bool:
    if is_call(node, (torch.transpose,), ("transpose",)):
        return len(node.args) >= 3 and {d % 4 for d in node.args[1:3]} == {2, 3}
    if is_call(node, (torch.permute,), ("permute",)):
        dims = node.args[1] if len(node.args) == 2 and isinstance(node.args[1], (tuple, list)) else node.args[1:]
        return [d % 4 for d in dims] == [0, 1, 3, 2]
    return False


def erase_replaced(graph, nodes) -> None:
    """Erase the nodes an op replaced that nothing reads any more, readers first (no dead-code elimination on
    the non-functional torch-level graph: it would drop in-place calls)."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in sorted(set(nodes), key=order.get, reverse=True):
        if not node.users:
            graph.erase_node(node)
