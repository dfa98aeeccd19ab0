"""Custom ops the patterns rewrite into. Each has a fake implementation (shapes only, for tracing), an autograd
formula, a reference implementation in plain torch ops (CPU, unsupported layouts), and a Triton kernel on CUDA.

``torch.ops.norm_fusion.linear_post_norm(x, weight, bias, residual, norm_weight, norm_bias, eps, layer_norm,
weight_kn, write_z, residual_out) -> (y, z, mean, rstd)``
    z = x @ weightᵀ + bias + residual, y = RMSNorm(z) or (``layer_norm``) LayerNorm(z) with the norm's weight and
    bias (+ residual_out, added after the norm), all [M, N] (x flattened, residuals [M, N]); z is returned when
    ``write_z`` (else an empty tensor), mean (LayerNorm, else empty) and rstd [M] in fp32. The post-norm: the norm
    as the GEMM's epilogue.

Each op also exists as ``*_tensor_eps`` taking eps as a 0-d tensor: torch.compile(dynamic=True) turns a model's
float eps into a graph input of that kind (a CPU scalar, so reading it costs no device sync).

The backward formula is unfused torch ops from the saved inputs (compiled graphs keep Inductor's own backward).
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import torch
from torch import Tensor

from .kernels import epilogue_gemm, tuning
from .report import log

# The layout constraint of every op that reads the residual stream. Under Inductor's default (exact strides) an
# input that is still an unrealized pointwise (an embedding, a residual add) is copied once per consuming op: q, k
# and v read the stream through three copies. A flexible layout lets Inductor realize the stream once and hand each
# op a view of it; the ops make their operands contiguous themselves where a kernel needs that.
STREAM_INPUT_TAGS = (torch._C.Tag.flexible_layout,)


def _cpu_reason(t: Tensor) -> Optional[str]:
    """Triton kernels run on CPU tensors only under the Triton interpreter, and only where the kernel tuning asks
    for it (tests: ``interpret_on_cpu``), since the interpreter is far slower than the reference."""
    if t.device.type == "cpu" and not tuning.current().interpret_on_cpu:
        return "CPU: reference implementation"
    return None


@functools.lru_cache(maxsize=None)
def _warn_once(reason: str) -> None:
    """A rewritten site whose operands the kernel cannot take at run time (the pass checks what it can see)."""
    log.warning("norm_fusion op runs the slow reference implementation on CUDA: %s", reason)


def _stats_dtype(x: Tensor) -> torch.dtype:
    """fp32 statistics for 16-bit and fp32 inputs; fp64 stays fp64 (gradcheck)."""
    return torch.promote_types(x.dtype, torch.float32)


def _as_nk(weight: Tensor, weight_kn: bool) -> Tensor:
    """The weight as [N, K] (a view): GPT-2's Conv1D stores it [K, N] and computes x @ W."""
    return weight.t() if weight_kn else weight


# --- linear → norm (post-norm) ---------------------------------------------------------------------------------

def linear_post_norm_reference(x, weight, bias, residual, norm_weight, norm_bias, eps, layer_norm, weight_kn=False,
                               residual_out=None):
    """The unfused computation in torch ops, with the kernel's rounding: z in fp32 for the statistics and y,
    z returned rounded to x's dtype. Returns (y, z, mean or None, rstd), 2-D [M, N] and [M]."""
    acc = _stats_dtype(x)
    x2d = x.reshape(-1, x.shape[-1])
    z = torch.mm(x2d, _as_nk(weight, weight_kn).t()).to(acc)
    for t in (bias, residual):
        if t is not None:
            z = z + t.to(acc)
    if layer_norm:
        var, mean = torch.var_mean(z, -1, correction=0)
        rstd = torch.rsqrt(var + eps)
        y = (z - mean[:, None]) * rstd[:, None]
    else:
        mean, rstd = None, torch.rsqrt(z.pow(2).mean(-1) + eps)
        y = z * rstd[:, None]
    if norm_weight is not None:
        y = y * norm_weight.to(acc)
    if norm_bias is not None:
        y = y + norm_bias.to(acc)
    if residual_out is not None:
        y = y + residual_out.reshape(y.shape).to(acc)
    stats = (mean.float() if mean is not None else None, rstd.float())
    return (y.to(x.dtype), z.to(x.dtype), *stats)


def _kernel_post_unsupported_reason(x2d, weight, weight_kn, residuals, layer_norm) -> Optional[str]:
    """None when the Triton kernel runs these operands."""
    epilogue = epilogue_gemm.Epilogue(post_norm="ln" if layer_norm else "rms")
    reason = _cpu_reason(x2d) or epilogue_gemm.unsupported_reason(x2d, weight, weight_kn, epilogue)
    if reason is None and any(r is not None and (not r.is_contiguous() or r.dtype != x2d.dtype) for r in residuals):
        reason = "a residual is not contiguous or not in the input's dtype"
    return reason


def _linear_post_norm(x, weight, bias, residual, norm_weight, norm_bias, eps, layer_norm, weight_kn, write_z,
                      residual_out=None, config=None):
    """``config`` given: the kernel with that block config, unchecked (the pass checked the operands when
    tracing)."""
    x2d = x.reshape(-1, x.shape[-1])
    N = weight.shape[1 if weight_kn else 0]
    residual, residual_out = (r.reshape(-1, N) if r is not None else None for r in (residual, residual_out))
    reason = None
    if config is None:
        reason = _kernel_post_unsupported_reason(x2d, weight, weight_kn, (residual, residual_out), layer_norm)
    if reason is None:
        y, z, mean, rstd = epilogue_gemm.post_norm_gemm(
            x2d, weight, bias, residual, norm_weight, norm_bias, eps, layer_norm=layer_norm, write_z=write_z,
            w_kn=weight_kn, residual_after=residual_out, config=config)
    else:
        if x.is_cuda:
            _warn_once(reason)
        y, z, mean, rstd = linear_post_norm_reference(x2d, weight, bias, residual, norm_weight, norm_bias, eps,
                                                      layer_norm, weight_kn, residual_out)
    return (y, z if write_z else x.new_empty(0), mean if layer_norm else x.new_empty(0, dtype=torch.float32), rstd)


@torch.library.custom_op("norm_fusion::linear_post_norm", mutates_args=(), tags=STREAM_INPUT_TAGS)
def linear_post_norm(x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Optional[Tensor],
                     norm_weight: Optional[Tensor], norm_bias: Optional[Tensor], eps: float, layer_norm: bool,
                     weight_kn: bool = False, write_z: bool = False, residual_out: Optional[Tensor] = None
                     ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return _linear_post_norm(x, weight, bias, residual, norm_weight, norm_bias, eps, layer_norm, weight_kn,
                             write_z, residual_out)


@torch.library.custom_op("norm_fusion::linear_post_norm_tensor_eps", mutates_args=(), tags=STREAM_INPUT_TAGS)
def linear_post_norm_tensor_eps(x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Optional[Tensor],
                                norm_weight: Optional[Tensor], norm_bias: Optional[Tensor], eps: Tensor,
                                layer_norm: bool, weight_kn: bool = False, write_z: bool = False,
                                residual_out: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return _linear_post_norm(x, weight, bias, residual, norm_weight, norm_bias, eps.item(), layer_norm, weight_kn,
                             write_z, residual_out)


@linear_post_norm.register_fake
@linear_post_norm_tensor_eps.register_fake
def _(x, weight, bias, residual, norm_weight, norm_bias, eps, layer_norm, weight_kn=False, write_z=False,
      residual_out=None):
    M, N = math.prod(x.shape[:-1]), weight.shape[1 if weight_kn else 0]
    return (x.new_empty(M, N), x.new_empty(M, N) if write_z else x.new_empty(0),
            x.new_empty(M if layer_norm else 0, dtype=torch.float32), x.new_empty(M, dtype=torch.float32))


_POST_TENSORS = (0, 1, 2, 3, 4, 5, 10)  # positions of the op's tensor arguments


def _post_setup_context(ctx, inputs, output):
    inputs = list(inputs) + [None] * (11 - len(inputs))
    ctx.save_for_backward(*(inputs[i] for i in _POST_TENSORS))
    ctx.eps, ctx.layer_norm, ctx.weight_kn = inputs[6], inputs[7], inputs[8]
    ctx.mark_non_differentiable(*output[2:])


def _post_backward(ctx, grad_y, grad_z, _grad_mean, _grad_rstd):
    """Differentiates the reference computation, recomputed from the saved inputs (compiled graphs keep
    Inductor's own backward and never call this)."""
    inputs = ctx.saved_tensors
    needs = [ctx.needs_input_grad[i] if i < len(ctx.needs_input_grad) else False for i in _POST_TENSORS]
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(need) if t is not None else None for t, need in zip(inputs, needs)]
        *linear, residual_out = leaves
        eps = ctx.eps.item() if isinstance(ctx.eps, Tensor) else ctx.eps
        y, z, _, _ = linear_post_norm_reference(*linear, eps, ctx.layer_norm, ctx.weight_kn, residual_out)
        outs, grads = [y], [grad_y]
        if grad_z is not None and grad_z.numel():
            outs.append(z)
            grads.append(grad_z)
        wanted = [t for t in leaves if t is not None and t.requires_grad]
        got = iter(torch.autograd.grad(outs, wanted, grads, allow_unused=True))
    result = [next(got) if t is not None and t.requires_grad else None for t in leaves]
    for i in (3, 6):  # the residuals are taken flattened
        if result[i] is not None:
            result[i] = result[i].reshape(inputs[i].shape)
    *linear, grad_residual_out = result
    return (*linear, None, None, None, None, grad_residual_out)


linear_post_norm.register_autograd(_post_backward, setup_context=_post_setup_context)
linear_post_norm_tensor_eps.register_autograd(_post_backward, setup_context=_post_setup_context)


# --- direct launch from Inductor's generated code -----------------------------------------------------------------

def trace_direct_launch(args: tuple, config: dict) -> torch.fx.GraphModule:
    """linear_post_norm's computation, with a fixed block config, as a functional graph of aten ops and Triton launches
    (``triton_kernel_wrapper_functional``): what the pass inserts so that Inductor's generated code launches the
    kernels itself — no Python op call per step, CUDA graphs possible, Inductor's kernel cache serves them.

    ``args`` are the op's arguments (float eps) with fake tensors; the graph's placeholders are the tensor arguments in order, its outputs the op's.
    This is what ``torch.library.triton_op`` does under functionalization, done here because the pass runs after
    AOTAutograd's functionalization."""
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.functional_tensor import FunctionalTensorMode, dispatch_functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    def fused(*tensors):
        full = list(args)
        for i, t in zip(positions, tensors):
            full[i] = t
        return _linear_post_norm(*full, config=config)

    tensors = [args[i] for i in positions]
    fake_mode = torch._guards.detect_fake_mode(tensors)
    with fake_mode:
        # with Inductor's decompositions, as the rest of the graph (e.g. _to_copy has no lowering of its own)
        gm = make_fx(dispatch_functionalize(fused, FunctionalTensorMode()), select_decomp_table(),
                     tracing_mode="real")(*tensors)
    if any(n.op == "get_attr" for n in gm.graph.nodes):
        raise RuntimeError("the traced launch holds tensor constants")
    return gm
