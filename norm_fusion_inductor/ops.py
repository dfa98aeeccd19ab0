"""Custom ops the patterns rewrite into. Each has a fake implementation (shapes only, for tracing), an autograd
formula, a reference implementation in plain torch ops (CPU, unsupported layouts), and a Triton kernel on CUDA.

``torch.ops.norm_fusion.rms_norm_linear(x, norm_weight, weight, bias, eps) -> (out, rstd)``
    out = (rmsnorm(x) · norm_weight) @ weightᵀ + bias, flattened to [M, N] with M = x.numel() / K;
    rstd = rsqrt(mean(x², -1) + eps) in fp32, shaped x.shape[:-1] + (1,), saved for backward.

``torch.ops.norm_fusion.layer_norm_linear(x, norm_weight, norm_bias, weight, bias, eps) -> (out, mean, rstd)``
    out = layernorm(x; norm_weight, norm_bias) @ weightᵀ + bias, flattened to [M, N]; mean and rstd in fp32,
    shaped x.shape[:-1] + (1,).

``torch.ops.norm_fusion.linear_post_norm(x, weight, bias, residual, norm_weight, norm_bias, eps, layer_norm,
weight_kn, write_z, residual_out) -> (y, z, mean, rstd)``
    z = x @ weightᵀ + bias + residual, y = RMSNorm(z) or (``layer_norm``) LayerNorm(z) with the norm's weight and
    bias (+ residual_out, added after the norm), all [M, N] (x flattened, residuals [M, N]); z is returned when
    ``write_z`` (else an empty tensor), mean (LayerNorm, else empty) and rstd [M] in fp32. The post-norm: the norm
    as the GEMM's epilogue.

Each op also exists as ``*_tensor_eps`` taking eps as a 0-d tensor: torch.compile(dynamic=True) turns a model's
float eps into a graph input of that kind (a CPU scalar, so reading it costs no device sync).

The backward formulas are unfused torch ops from x and the saved statistics: the normalized tensor is
recomputed, never stored (design.md §1.4).
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import torch
from torch import Tensor

from .kernels import norm_gemm, row_norm, tuning
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


def _kernel_unsupported_reason(x2d: Tensor, weight: Tensor, weight_kn: bool, center: bool) -> Optional[str]:
    """None when the Triton kernel runs these operands."""
    return _cpu_reason(x2d) or norm_gemm.supports(x2d, weight, weight_kn, center)


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


def _linear_epilogue(a: Tensor, x_dtype, weight_nk: Tensor, scale: Tensor, bias) -> Tensor:
    """(a @ Wᵀ) · scale (+ bias), with a rounded to x's dtype as the kernel feeds it."""
    acc = scale.dtype
    out = torch.mm(a.to(x_dtype), weight_nk.t()).to(acc) * scale
    if bias is not None:
        out = out + bias.to(acc)
    return out.to(x_dtype)


# --- RMSNorm → linear -------------------------------------------------------------------------------------------

def rms_norm_linear_reference(x: Tensor, norm_weight: Optional[Tensor], weight: Tensor, bias: Optional[Tensor],
                              eps: float, weight_kn: bool = False) -> tuple[Tensor, Tensor]:
    """The unfused computation in torch ops, with the fused kernel's rounding: (x·γ) in x's dtype, fp32 stats."""
    acc = _stats_dtype(x)
    xf = x.reshape(-1, x.shape[-1]).to(acc)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    a = xf * norm_weight.to(acc) if norm_weight is not None else xf
    return _linear_epilogue(a, x.dtype, _as_nk(weight, weight_kn), rstd, bias), rstd.float()


def _rms_norm_linear(x, norm_weight, weight, bias, eps, weight_kn, plan=None):
    """``plan`` given: the kernel with that plan, unchecked (the pass checked the operands when tracing)."""
    x2d = x.reshape(-1, x.shape[-1])
    reason = None if plan is not None else _kernel_unsupported_reason(x2d, weight, weight_kn, center=False)
    if reason is None:
        out, rstd = norm_gemm.rms_norm_matmul(x2d, norm_weight, weight, bias, eps, plan=plan, w_kn=weight_kn)
    else:
        if x.is_cuda:
            _warn_once(reason)
        out, rstd = rms_norm_linear_reference(x2d, norm_weight, weight, bias, eps, weight_kn)
    return out, rstd.reshape(*x.shape[:-1], 1)


@torch.library.custom_op("norm_fusion::rms_norm_linear", mutates_args=(), tags=STREAM_INPUT_TAGS)
def rms_norm_linear(x: Tensor, norm_weight: Optional[Tensor], weight: Tensor, bias: Optional[Tensor],
                    eps: float, weight_kn: bool = False) -> tuple[Tensor, Tensor]:
    return _rms_norm_linear(x, norm_weight, weight, bias, eps, weight_kn)


@torch.library.custom_op("norm_fusion::rms_norm_linear_tensor_eps", mutates_args=(), tags=STREAM_INPUT_TAGS)
def rms_norm_linear_tensor_eps(x: Tensor, norm_weight: Optional[Tensor], weight: Tensor, bias: Optional[Tensor],
                               eps: Tensor, weight_kn: bool = False) -> tuple[Tensor, Tensor]:
    return _rms_norm_linear(x, norm_weight, weight, bias, eps.item(), weight_kn)


@rms_norm_linear.register_fake
@rms_norm_linear_tensor_eps.register_fake
def _(x, norm_weight, weight, bias, eps, weight_kn=False):
    out = x.new_empty(math.prod(x.shape[:-1]), weight.shape[1 if weight_kn else 0])
    return out, x.new_empty(*x.shape[:-1], 1, dtype=torch.float32)


def _rms_setup_context(ctx, inputs, output):
    x, norm_weight, weight, bias, eps, *weight_kn = inputs
    _, rstd = output
    ctx.save_for_backward(x, norm_weight, weight, rstd)
    ctx.has_bias = bias is not None
    ctx.weight_kn = bool(weight_kn and weight_kn[0])
    ctx.mark_non_differentiable(rstd)


def _rms_backward(ctx, grad_out, _grad_rstd):
    """x̂ = x·rstd, n = x̂·γ; dW = dYᵀ n, dn = dY W, dγ = Σ_rows dn·x̂, g = dn·γ,
    dx = rstd · (g − x̂ · mean(g·x̂, -1))."""
    x, norm_weight, weight, rstd = ctx.saved_tensors
    acc = _stats_dtype(x)
    x_hat = x.reshape(-1, x.shape[-1]).to(acc) * rstd.reshape(-1, 1).to(acc)
    grads = _affine_linear_backward(ctx, grad_out, x_hat, x.dtype, norm_weight, None, weight, (1, None, 2, 3))
    grad_normed = grads.pop("grad_normed")
    grad_x = None
    if ctx.needs_input_grad[0]:
        grad_x = rstd.reshape(-1, 1).to(acc) * (grad_normed - x_hat * (grad_normed * x_hat).mean(-1, keepdim=True))
        grad_x = grad_x.to(x.dtype).reshape(x.shape)
    return grad_x, grads["norm_weight"], grads["weight"], grads["bias"], None, None


def _affine_linear_backward(ctx, grad_out, x_hat, x_dtype, gamma, beta, weight, indices):
    """Gradients of out = (x̂·γ + β) Wᵀ + b for the linear and the affine part; ``grad_normed`` is dL/dx̂.
    ``indices`` are the input positions of (γ, β, W, b) in the op, for needs_input_grad."""
    i_gamma, i_beta, i_weight, i_bias = indices
    acc = x_hat.dtype
    normed = x_hat * gamma.to(acc) if gamma is not None else x_hat
    if beta is not None:
        normed = normed + beta.to(acc)
    weight_nk = _as_nk(weight, ctx.weight_kn)
    grad_out = grad_out.reshape(-1, weight_nk.shape[0])
    need = ctx.needs_input_grad
    grad_n = torch.mm(grad_out, weight_nk).to(acc)
    grad_weight = None
    if need[i_weight]:
        grad_weight = torch.mm(grad_out.t(), normed.to(x_dtype))  # [N, K]
        grad_weight = grad_weight.t() if ctx.weight_kn else grad_weight
    grads = {
        "weight": grad_weight,
        "bias": grad_out.to(acc).sum(0).to(weight.dtype) if ctx.has_bias and need[i_bias] else None,
        "norm_weight": (grad_n * x_hat).sum(0).to(gamma.dtype) if gamma is not None and need[i_gamma] else None,
        "norm_bias": grad_n.sum(0).to(beta.dtype) if beta is not None and need[i_beta] else None,
    }
    grads["grad_normed"] = grad_n * gamma.to(acc) if gamma is not None else grad_n
    return grads


rms_norm_linear.register_autograd(_rms_backward, setup_context=_rms_setup_context)
rms_norm_linear_tensor_eps.register_autograd(_rms_backward, setup_context=_rms_setup_context)


# --- LayerNorm → linear -----------------------------------------------------------------------------------------

def layer_norm_linear_reference(x, norm_weight, norm_bias, weight, bias, eps, weight_kn=False):
    """The unfused computation in torch ops, with the kernel's algebra (fp32 stats, (x − μ)·γ rounded to x's
    dtype, β folded into the bias)."""
    acc = _stats_dtype(x)
    xf = x.reshape(-1, x.shape[-1]).to(acc)
    var, mean = torch.var_mean(xf, -1, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    a = xf - mean
    if norm_weight is not None:
        a = a * norm_weight.to(acc)
    weight_nk = _as_nk(weight, weight_kn)
    v = bias.to(acc) if bias is not None else None
    if norm_bias is not None:  # β through the linear: W β (+ b)
        v = weight_nk.to(acc) @ norm_bias.to(acc) + (v if v is not None else 0)
    return _linear_epilogue(a, x.dtype, weight_nk, rstd, v), mean.float(), rstd.float()


def _layer_norm_linear(x, norm_weight, norm_bias, weight, bias, eps, weight_kn, plan=None):
    x2d = x.reshape(-1, x.shape[-1])
    reason = None if plan is not None else _kernel_unsupported_reason(x2d, weight, weight_kn, center=True)
    if reason is None:
        out, mean, rstd = norm_gemm.layer_norm_matmul(x2d, norm_weight, norm_bias, weight, bias, eps,
                                                           plan=plan, w_kn=weight_kn)
    else:
        if x.is_cuda:
            _warn_once(reason)
        out, mean, rstd = layer_norm_linear_reference(x2d, norm_weight, norm_bias, weight, bias, eps, weight_kn)
    stats_shape = (*x.shape[:-1], 1)
    return out, mean.reshape(stats_shape), rstd.reshape(stats_shape)


@torch.library.custom_op("norm_fusion::layer_norm_linear", mutates_args=(), tags=STREAM_INPUT_TAGS)
def layer_norm_linear(x: Tensor, norm_weight: Optional[Tensor], norm_bias: Optional[Tensor], weight: Tensor,
                      bias: Optional[Tensor], eps: float, weight_kn: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    return _layer_norm_linear(x, norm_weight, norm_bias, weight, bias, eps, weight_kn)


@torch.library.custom_op("norm_fusion::layer_norm_linear_tensor_eps", mutates_args=(), tags=STREAM_INPUT_TAGS)
def layer_norm_linear_tensor_eps(x: Tensor, norm_weight: Optional[Tensor], norm_bias: Optional[Tensor],
                                 weight: Tensor, bias: Optional[Tensor], eps: Tensor, weight_kn: bool = False
                                 ) -> tuple[Tensor, Tensor, Tensor]:
    return _layer_norm_linear(x, norm_weight, norm_bias, weight, bias, eps.item(), weight_kn)


@layer_norm_linear.register_fake
@layer_norm_linear_tensor_eps.register_fake
def _(x, norm_weight, norm_bias, weight, bias, eps, weight_kn=False):
    out = x.new_empty(math.prod(x.shape[:-1]), weight.shape[1 if weight_kn else 0])
    stats = (*x.shape[:-1], 1)
    return out, x.new_empty(stats, dtype=torch.float32), x.new_empty(stats, dtype=torch.float32)


def _ln_setup_context(ctx, inputs, output):
    x, norm_weight, norm_bias, weight, bias, eps, *weight_kn = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, norm_weight, norm_bias, weight, mean, rstd)
    ctx.has_bias = bias is not None
    ctx.weight_kn = bool(weight_kn and weight_kn[0])
    ctx.mark_non_differentiable(mean, rstd)


def _ln_backward(ctx, grad_out, _grad_mean, _grad_rstd):
    """x̂ = (x − μ)·rstd, n = x̂·γ + β; g = dn·γ, dx = rstd · (g − mean(g) − x̂ · mean(g·x̂))."""
    x, norm_weight, norm_bias, weight, mean, rstd = ctx.saved_tensors
    acc = _stats_dtype(x)
    rstd2d = rstd.reshape(-1, 1).to(acc)
    x_hat = (x.reshape(-1, x.shape[-1]).to(acc) - mean.reshape(-1, 1).to(acc)) * rstd2d
    grads = _affine_linear_backward(ctx, grad_out, x_hat, x.dtype, norm_weight, norm_bias, weight, (1, 2, 3, 4))
    g = grads.pop("grad_normed")
    grad_x = None
    if ctx.needs_input_grad[0]:
        grad_x = rstd2d * (g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True))
        grad_x = grad_x.to(x.dtype).reshape(x.shape)
    return grad_x, grads["norm_weight"], grads["norm_bias"], grads["weight"], grads["bias"], None, None


layer_norm_linear.register_autograd(_ln_backward, setup_context=_ln_setup_context)
layer_norm_linear_tensor_eps.register_autograd(_ln_backward, setup_context=_ln_setup_context)


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


def _kernel_post_unsupported_reason(x2d, weight, weight_kn, residuals, M, N) -> Optional[str]:
    reason = _kernel_unsupported_reason(x2d, weight, weight_kn, center=False)
    if reason is None:
        reason = row_norm.post_norm_unsupported_reason(x2d.dtype, x2d.shape[1], N, M, x2d.device)
    if reason is None and any(r is not None and (not r.is_contiguous() or r.dtype != x2d.dtype) for r in residuals):
        reason = "a residual is not contiguous or not in the input's dtype"
    return reason


def _linear_post_norm(x, weight, bias, residual, norm_weight, norm_bias, eps, layer_norm, weight_kn, write_z,
                      residual_out=None, plan=None):
    x2d = x.reshape(-1, x.shape[-1])
    N = weight.shape[1 if weight_kn else 0]
    residual, residual_out = (r.reshape(-1, N) if r is not None else None for r in (residual, residual_out))
    reason = None
    if plan is None:
        reason = _kernel_post_unsupported_reason(x2d, weight, weight_kn, (residual, residual_out), x2d.shape[0], N)
    if reason is None:
        y, z, mean, rstd = norm_gemm.matmul_norm(x2d, weight, bias, residual, norm_weight, norm_bias, eps,
                                                 layer_norm=layer_norm, write_z=write_z, plan=plan, w_kn=weight_kn,
                                                 residual_out=residual_out)
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
    """Differentiates the reference computation, recomputed from the saved inputs (the fused backward is the
    subject of issue 5; compiled graphs keep Inductor's own backward and never call this)."""
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

_IMPLEMENTATIONS = {"rms": _rms_norm_linear, "ln": _layer_norm_linear, "post": _linear_post_norm}


def trace_direct_launch(norm: str, args: tuple, plan: tuple) -> torch.fx.GraphModule:
    """The fused op's computation, with a fixed kernel plan, as a functional graph of aten ops and Triton launches
    (``triton_kernel_wrapper_functional``): what the pass inserts so that Inductor's generated code launches the
    kernels itself — no Python op call per step, CUDA graphs possible, Inductor's kernel cache serves them.

    ``norm`` is "rms", "ln" (pre-norm ops) or "post" (linear_post_norm); ``args`` are the op's arguments (float
    eps) with fake tensors; the graph's placeholders are the tensor arguments in order, its outputs the op's.
    This is what ``torch.library.triton_op`` does under functionalization, done here because the pass runs after
    AOTAutograd's functionalization."""
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.functional_tensor import FunctionalTensorMode, dispatch_functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    implementation = _IMPLEMENTATIONS[norm]

    def fused(*tensors):
        full = list(args)
        for i, t in zip(positions, tensors):
            full[i] = t
        return implementation(*full, plan=plan)

    tensors = [args[i] for i in positions]
    fake_mode = torch._guards.detect_fake_mode(tensors)
    with fake_mode:
        # with Inductor's decompositions, as the rest of the graph (e.g. _to_copy has no lowering of its own)
        gm = make_fx(dispatch_functionalize(fused, FunctionalTensorMode()), select_decomp_table(),
                     tracing_mode="real")(*tensors)
    if any(n.op == "get_attr" for n in gm.graph.nodes):
        raise RuntimeError("the traced launch holds tensor constants")
    return gm
