"""Regrouped normalization (docs/design.md §4): the custom op of the composed-epilogue GEMM, and the small torch
functions around it that the pass inserts into the graph (Inductor compiles those itself).

    producer:  z = a Wᵀ + b + r                      (+ per-segment partial sums of z, kernel STATS)
    finish:    rstd, μ from the partials               (finish_stats: Σ over segments, Chan's formula for LN)
    consumer:  y = act(rstd · (z (W'·γ)ᵀ) − rstd·μ · u + v)
               u = Σ_k (W'·γ)[n, k]  (column sums of the folded, rounded weight),  v = W'β + b'

RMSNorm is the consumer with μ = 0 and no u. LN(z) W'ᵀ + b' = rstd·(z − μ)·γ W'ᵀ + W'β + b' gives the consumer
form; the normalized tensor is never written, and the GEMM that produced z never writes a separate norm output.

``torch.ops.norm_fusion.epilogue_gemm(a, w, bias, residual, scale, shift, u, row_norm, activation, write_aux,
stats, w_kn, residual_norm="none", residual_scale=None, residual_shift=None, residual_weight=None,
residual_bias=None, backend="triton", head_dim=0, head_weight=None, head_eps=0.0, rope_cos=None, rope_sin=None,
head_eps_tensor=None, rope_interleaved=False, rope_dim=0, head_gates=False, head_center=False) -> (out, aux,
partials)``: the Triton
kernel ``kernels.epilogue_gemm`` where it runs (CUDA sm_90+, or the Triton interpreter), or with
``backend="quack"`` Quack's CuTe-DSL GEMM (``kernels.quack_epilogue_gemm``) where it is installed and takes the
epilogue; else the next of those, and the same math in torch ops last, with the reason logged once. ``head_dim``
adds a per-head RMSNorm of the output (QK-norm: weight ``head_weight`` [D] or [H, D], ``head_eps`` or the 0-d
``head_eps_tensor`` that dynamic shapes make of it; ``head_center``: a LayerNorm without bias, Cohere's) and, with ``rope_cos``/``rope_sin`` [M, head_dim], the
rotate-half rotary embedding after it — for a q/k projection (Triton kernel only; ``rope_interleaved``: its pairs
neighbouring columns, GPT-J's form; ``rope_dim``: the partial rotary, the first that many columns of each head
rotated over their own halves by tables [M, rope_dim], the others passed through; ``head_gates``:
the odd heads are the even ones' output gates, passed through); without ``head_weight``, the rotary embedding
alone. No autograd: the pass inserts it into joint graphs after autograd, whose backward reads ``aux`` (the
pre-activation) and the statistics.

The backward regroups the same way (docs/design_notes/regrouped_backward.md). For a pre-norm RMSNorm
n = x·rstd·γ read by one linear (z = n Wᵀ): dn = dz W is that linear's dgrad, and its epilogue finishes the norm's
backward, ``torch.ops.norm_fusion.rms_backward_gemm(dz, w, x, rstd, gamma, dresidual, w_kn, row_mean)
-> (dx, dγ)``:  g = dn·γ,  dx = rstd·(g − x̂·c̄) + dR,  c̄ = mean(g·x̂) given as ``row_mean`` (variant C:
c̄ = Σ_j dz_j·(z_j − b_j)/N from the consumer's saved pre-activation z),  dγ = Σ_m dn·x̂ (fp32); the epilogue is
elementwise, any width. Not wired into a rewrite: on the Triton mainloop it ran 0.82–0.85× of cuBLAS + Inductor.
"""

from __future__ import annotations

import collections
import functools
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .kernels import epilogue_gemm as kernel
from .kernels import quack_epilogue_gemm as quack_kernel
from .kernels import weight_fold
from .kernels.common import aligned16, interpret_mode, traced
from .ops import STREAM_INPUT_TAGS
from .report import Implementation, log

head_dim_problem = kernel.head_dim_problem  # for the patterns: whether a q/k norm fits the epilogue


def _epilogue(row_norm, activation, write_aux, stats, has_bias, has_residual, residual_norm, head_dim=0,
              rope=False, head_norm=True, rope_interleaved=False, rope_dim=0, head_gates=False,
              head_center=False) -> kernel.Epilogue:
    return kernel.Epilogue(row_norm=row_norm, bias=has_bias, residual=has_residual, activation=activation,
                           write_aux=write_aux, stats=stats, residual_norm=residual_norm, head_dim=head_dim,
                           rope=rope, head_norm=head_norm, rope_interleaved=rope_interleaved, rope_dim=rope_dim,
                           head_gates=head_gates, head_center=head_center)


def run_epilogue_gemm(a, w, bias, residual, scale, shift, u, row_norm, activation, write_aux, stats, w_kn,
                      residual_norm="none", residual_scale=None, residual_shift=None, residual_weight=None,
                      residual_bias=None, backend="triton", head_dim=0, head_weight=None, head_eps=0.0,
                      rope_cos=None, rope_sin=None, head_eps_tensor=None, rope_interleaved=False, rope_dim=0,
                      head_gates=False, head_center=False, *,
                      config: Optional[dict] = None):
    """The op's computation, with its arguments. ``config`` (Triton backend): that block config instead of the
    tuned one — how the pass traces a direct launch into its graph (``launch_config``), the kernel launched from
    Inductor's generated code with no Python op per call."""
    epilogue = _epilogue(row_norm, activation, write_aux, stats, bias is not None, residual is not None,
                         residual_norm, head_dim, rope_cos is not None,
                         head_norm=head_weight is not None or not head_dim, rope_interleaved=rope_interleaved,
                         rope_dim=rope_dim, head_gates=head_gates, head_center=head_center)
    res_norm = None
    if residual_norm != "none":
        res_norm = kernel.ResidualNorm(*(t.contiguous() if t is not None else None for t in (
            residual_scale, residual_shift, residual_weight, residual_bias)))
    head_norm = None
    if head_dim:
        if head_eps_tensor is not None:  # a graph input under dynamic shapes (0-d, on the host): one fp32 element
            head_eps = head_eps_tensor.reshape(1).to(device=a.device, dtype=torch.float32)
        head_norm = kernel.HeadNorm(head_weight.contiguous() if head_weight is not None else None, head_eps, *(
            t.contiguous() if t is not None else None for t in (rope_cos, rope_sin)))
    a, w, residual, reason = prepare(a, w, residual, w_kn, epilogue)
    if reason is not None:
        _warn_once(f"runs its torch reference: {reason}")
        return reference(a, w, bias, residual, scale, shift, u, epilogue, w_kn, res_norm, head_norm)
    contig = [t.contiguous() if t is not None else None for t in (bias, scale, shift, u)]
    if backend == "quack":
        result = _on_quack(a, w, residual, *contig, epilogue, w_kn)
        if result is not None:
            return result
    elif backend != "triton":
        raise ValueError(f"epilogue_gemm backend must be 'triton' or 'quack', got {backend!r}")
    return kernel.epilogue_gemm(a, w, epilogue=epilogue, w_kn=w_kn, residual=residual, bias=contig[0],
                                scale=contig[1], shift=contig[2], u=contig[3], residual_norm=res_norm,
                                head_norm=head_norm, config=config)


# The op is declared with torch.library's low-level API: one kernel for every device and a fake, nothing else (no
# autograd: the pass inserts it after autograd). custom_op's Python autograd, ADInplaceOrView and aliasing-check
# layers cost tens of µs per call on the GPU host (benchmarks/diagnostics/epilogue_host.py), which a graph that is
# not replayed by CUDA graphs pays per step. Its outputs never alias its inputs or each other (the kernels allocate
# them; the reference returns fresh tensors), which custom_op used to check per call and tests/test_regrouped.py's
# opcheck now checks once.
_LIB = torch.library.Library("norm_fusion", "FRAGMENT")
_LIB.define(
    "epilogue_gemm(Tensor a, Tensor w, Tensor? bias, Tensor? residual, Tensor? scale, Tensor? shift, Tensor? u, "
    "str row_norm, str activation, bool write_aux, str stats, bool w_kn, str residual_norm='none', "
    "Tensor? residual_scale=None, Tensor? residual_shift=None, Tensor? residual_weight=None, "
    "Tensor? residual_bias=None, str backend='triton', int head_dim=0, Tensor? head_weight=None, "
    "float head_eps=0.0, Tensor? rope_cos=None, Tensor? rope_sin=None, Tensor? head_eps_tensor=None, "
    "bool rope_interleaved=False, int rope_dim=0, bool head_gates=False, bool head_center=False) "
    "-> (Tensor, Tensor, Tensor)",
    tags=STREAM_INPUT_TAGS)
_LIB.impl("epilogue_gemm", run_epilogue_gemm, "CompositeExplicitAutograd")
epilogue_gemm = torch.ops.norm_fusion.epilogue_gemm.default


def launch_config(choice) -> Optional[dict]:
    """The block config to launch a selection choice's Triton GEMM with from Inductor's code, or None (the op)."""
    launched = choice.implementation == Implementation.REGROUPED_TRITON and isinstance(choice.plan, dict)
    return choice.plan if launched else None


def gemm_call(config: Optional[dict]):
    """What the pass's traced code calls: the op (its Python call per step), or with ``config`` the kernel
    itself, traced as a ``wrap_triton`` launch."""
    if config is None:
        return torch.ops.norm_fusion.epilogue_gemm
    return functools.partial(run_epilogue_gemm, config=config)


# (epilogue, a's shape, w's shape, dtype, w_kn) -> why Quack failed there; not tried again in this process
QUACK_FAILED: dict = {}


def _on_quack(a, w, residual, bias, scale, shift, u, epilogue: kernel.Epilogue, w_kn: bool):
    """Quack's result, or None (the reason logged once) where it cannot run: the caller runs the Triton kernel.
    A GEMM Quack failed on (at JIT time, typically) is not tried again in this process."""
    reason = quack_kernel.unsupported_reason(a, w, w_kn, epilogue)
    key = (epilogue, tuple(a.shape), tuple(w.shape), a.dtype, w_kn)
    if reason is None and key in QUACK_FAILED:
        return None
    if reason is None:
        try:
            return quack_kernel.epilogue_gemm(a, w, epilogue=epilogue, w_kn=w_kn, residual=residual, bias=bias,
                                              scale=scale, shift=shift, u=u)
        except Exception as e:  # never an exception in the user's step: the Triton kernel computes the same
            reason = f"Quack failed at {tuple(a.shape)} x {tuple(w.shape)} ({type(e).__name__}: {e})"
            QUACK_FAILED[key] = reason
    _warn_once(f"the Quack backend is not used, the Triton kernel runs instead: {reason}")
    return None


def _tma_ready(t: Tensor) -> bool:
    return t.stride(-1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and aligned16(t)


def _fresh(t: Tensor) -> Tensor:
    return t if _tma_ready(t) else t.clone(memory_format=torch.contiguous_format)


def prepare(a: Tensor, w: Tensor, residual: Optional[Tensor], w_kn: bool, epilogue: kernel.Epilogue):
    """(a, w, residual, None) in layouts the kernel reads, or the operands and the reason it cannot run them."""
    if a.dtype in (torch.float16, torch.bfloat16, torch.float32) and w.dtype == a.dtype and a.dim() == w.dim() == 2:
        a, w, residual = _tma_operands(a, w, residual, w_kn)
    reason = kernel.unsupported_reason(a, w, w_kn, epilogue)
    if reason is None and residual is not None and not _tma_ready(residual):
        reason = f"residual rows are not 16-byte aligned (TMA; strides {tuple(residual.stride())})"
    return a, w, residual, reason


def _tma_operands(a: Tensor, w: Tensor, residual: Optional[Tensor], w_kn: bool):
    """The operands in layouts TMA reads: a transposed or sliced view copied, K padded with zeros (on both
    operands: they add nothing to the products) where its rows are not 16-byte aligned. A copy is one pass over
    the operand; the torch fallback would be an fp32 matmul."""
    K = a.shape[1]
    align = 16 // a.element_size()
    if K % align:
        padded = -(-K // align) * align
        a_p = a.new_zeros(a.shape[0], padded)
        a_p[:, :K] = a
        w_p = w.new_zeros((padded, w.shape[1]) if w_kn else (w.shape[0], padded))
        if w_kn:
            w_p[:K] = w
        else:
            w_p[:, :K] = w
        a, w = a_p, w_p
    a, w = _fresh(a), _fresh(w)
    if residual is not None and (residual.shape[1] * residual.element_size()) % 16 == 0:
        residual = _fresh(residual)
    return a, w, residual


@torch.library.register_fake("norm_fusion::epilogue_gemm", lib=_LIB)
def _epilogue_gemm_fake(a, w, bias, residual, scale, shift, u, row_norm, activation, write_aux, stats, w_kn,
                        residual_norm="none", residual_scale=None, residual_shift=None, residual_weight=None,
                        residual_bias=None, backend="triton", head_dim=0, head_weight=None, head_eps=0.0,
                        rope_cos=None, rope_sin=None, head_eps_tensor=None, rope_interleaved=False, rope_dim=0,
                        head_gates=False, head_center=False):
    M = a.shape[0]
    N = w.shape[1 if w_kn else 0]
    gated = activation in kernel.GATED
    out = a.new_empty(M, N // 2 if gated else N)
    aux = a.new_empty(M, N) if write_aux else a.new_empty(0)
    if stats != "none":
        partials = a.new_empty(kernel.STATS[stats], kernel.num_segments(N, a.device), M, dtype=torch.float32)
    else:
        partials = a.new_empty(0, dtype=torch.float32)
    return out, aux, partials


@torch.library.custom_op("norm_fusion::rms_backward_gemm", mutates_args=(), tags=STREAM_INPUT_TAGS)
def rms_backward_gemm(dz: Tensor, w: Tensor, x: Tensor, rstd: Tensor, gamma: Tensor, dresidual: Optional[Tensor],
                      w_kn: bool, row_mean: Tensor) -> tuple[Tensor, Tensor]:
    epilogue = kernel.Epilogue(residual=dresidual is not None, norm_backward="rms")
    dz, w, _, reason = prepare(dz, w, None, w_kn, epilogue)
    if reason is None:
        reason = next((f"{name} is not a contiguous [M, N] tensor with 16-byte aligned rows"
                       for name, t in (("x", x), ("dresidual", dresidual))
                       if t is not None and (not t.is_contiguous() or not _tma_ready(t) or t.dtype != dz.dtype)),
                      None)
    if reason is not None:
        _warn_once(f"rms_backward_gemm runs its torch reference: {reason}")
        return rms_backward_reference(dz, w, x, rstd, gamma, dresidual, w_kn, row_mean)
    dx, colpart = kernel.norm_backward_gemm(dz, w, x, rstd.float().contiguous(), gamma.contiguous(), dresidual,
                                            row_mean.float().contiguous(), w_kn=w_kn)
    return dx, colpart.sum(0)


@rms_backward_gemm.register_fake
def _(dz, w, x, rstd, gamma, dresidual, w_kn, row_mean):
    return torch.empty_like(x), x.new_empty(x.shape[1], dtype=torch.float32)


def rms_backward_reference(dz, w, x, rstd, gamma, dresidual, w_kn: bool, row_mean):
    """rms_backward_gemm's math in torch ops (fp32)."""
    dn = dz.float() @ (w.float() if w_kn else w.float().t())  # w [F, N] (w_kn, nn.Linear's) or [N, F]
    x_hat = x.float() * rstd.float()[:, None]
    g = dn * gamma.float()
    c = row_mean.float()[:, None]
    dx = rstd.float()[:, None] * (g - x_hat * c)
    if dresidual is not None:
        dx = dx + dresidual.float()
    return dx.to(x.dtype), (dn * x_hat).sum(0)


@functools.lru_cache(maxsize=None)
def _warn_once(reason: str) -> None:
    log.warning("norm_fusion: epilogue_gemm: %s", reason)


_ACTIVATIONS = {
    "none": lambda z: z, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "silu": F.silu, "relu2": lambda z: F.relu(z) ** 2,
}


def reference(a, w, bias, residual, scale, shift, u, epilogue: kernel.Epilogue, w_kn: bool,
              residual_norm: Optional[kernel.ResidualNorm] = None, head_norm: Optional[kernel.HeadNorm] = None):
    """The op's math in torch ops (fp32 epilogue), for devices and layouts the kernel does not take."""
    acc = a.float() @ (w.float() if w_kn else w.float().t())
    if epilogue.row_norm != "none":
        acc = acc * scale.float()[:, None]
    if epilogue.row_norm == "ln":
        acc = acc - shift.float()[:, None] * u.float()[None, :]
    if bias is not None:
        acc = acc + bias.float()
    projected = acc
    if head_norm is not None:
        acc = per_head_norm(acc, epilogue.head_dim, head_norm, epilogue.rope_interleaved, epilogue.rope_dim,
                            epilogue.head_gates, epilogue.head_center)
    if residual is not None:
        acc = acc + normalized_residual(residual, residual_norm)
    z = acc.to(a.dtype)
    aux = (projected if head_norm is not None else acc).to(a.dtype)  # with a per-head norm: its input
    if epilogue.gated:
        act = _ACTIVATIONS[epilogue.activation[:-len("_mul")]]
        out = (act(acc[:, 0::2]) * acc[:, 1::2]).to(a.dtype)
    else:
        out = _ACTIVATIONS[epilogue.activation](acc).to(a.dtype)
    partials = a.new_empty(0, dtype=torch.float32)
    if epilogue.stats != "none":
        width = kernel.stats_width(a.device)
        segs = kernel.num_segments(z.shape[1], a.device)
        zf = F.pad(z.float(), (0, segs * width - z.shape[1])).view(z.shape[0], segs, width)
        if epilogue.stats == "rms":
            partials = (zf * zf).sum(-1).t().unsqueeze(0).contiguous()
        else:
            count = segment_counts(z.shape[1], width, segs, a.device)
            total = zf.sum(-1)
            valid = (torch.arange(width, device=a.device)[None, :] < count[:, None])
            d = torch.where(valid, zf - (total / count.clamp(min=1))[..., None], 0.0)
            partials = torch.stack([total.t(), (d * d).sum(-1).t()]).contiguous()
    if epilogue.write_aux and aux.data_ptr() == out.data_ptr():  # fp32 without an activation: one tensor
        aux = aux.clone()
    return out, aux if epilogue.write_aux else a.new_empty(0), partials


def per_head_norm(z: Tensor, head_dim: int, norm: kernel.HeadNorm, interleaved: bool = False,
                  rope_dim: int = 0, gates: bool = False, center: bool = False) -> Tensor:
    """The kernel's HEAD_DIM piece in fp32: each head's RMSNorm (``center``: LayerNorm, no bias; weight [D] or
    [H, D]; where it has a weight), then (cos and sin given)
    RoPE, its pairs halves (rotate_half; of the first ``rope_dim`` columns where given, tables [M, rope_dim]) or,
    ``interleaved``, neighbouring columns. ``gates``: the odd heads are passed through as they are."""
    M, N = z.shape
    if gates:  # the even heads alone, their gates between them unchanged
        pairs = z.view(M, N // (2 * head_dim), 2, head_dim)
        heads = per_head_norm(pairs[:, :, 0].reshape(M, -1), head_dim, norm, interleaved, rope_dim, center=center)
        return torch.stack([heads.view(M, -1, head_dim), pairs[:, :, 1]], 2).reshape(M, N)
    z = z.view(M, N // head_dim, head_dim)
    if norm.weight is not None:
        if center:
            z = z - z.mean(-1, keepdim=True)
        z = z * torch.rsqrt(z.square().mean(-1, keepdim=True) + norm.eps) * norm.weight.float()
    if norm.cos is not None:
        if rope_dim and not interleaved:  # the first rope_dim columns rotated, the others as they are
            rotated = per_head_norm(z[..., :rope_dim].reshape(M, -1), rope_dim, kernel.HeadNorm(None, 0.0, norm.cos,
                                                                                             norm.sin))
            return torch.cat([rotated.view(M, -1, rope_dim), z[..., rope_dim:]], -1).reshape(M, N)
        if interleaved:
            rotated = torch.stack([-z[..., 1::2], z[..., 0::2]], -1).flatten(-2)
        else:
            rotated = torch.cat([-z[..., head_dim // 2:], z[..., :head_dim // 2]], -1)
        z = z * norm.cos.float()[:, None, :] + rotated * norm.sin.float()[:, None, :]
    return z.reshape(M, N)


def normalized_residual(residual: Tensor, norm: Optional[kernel.ResidualNorm]) -> Tensor:
    """The residual in fp32, normalized on load when ``norm`` is given (the kernel's RESIDUAL_NORM)."""
    r = residual.float()
    if norm is None:
        return r
    r = r * norm.scale.float()[:, None]
    if norm.shift is not None:
        r = r - norm.shift.float()[:, None]
    if norm.weight is not None:
        r = r * norm.weight.float()
    if norm.bias is not None:
        r = r + norm.bias.float()
    return r


# --- graph-side pieces: plain torch functions the pass traces into the graph ------------------------------------

def segment_counts(N: int, width: int, segments: int, device) -> Tensor:
    """Valid columns of each statistics segment (the last may be short)."""
    start = torch.arange(segments, device=device, dtype=torch.float32) * width
    return (N - start).clamp(0, width)


def finish_stats(partials: Tensor, N: int, eps: float | Tensor, norm: str) -> tuple[Tensor, Optional[Tensor]]:
    """(rstd, μ) [M] fp32 from the producer's partials [S, segments, M]; μ is None for RMSNorm.

    LayerNorm combines the segments by Chan's formula, M2 = Σ_s M2_s + n_s (μ_s − μ)², so the variance does not
    cancel when |μ| ≫ σ."""
    if norm == "rms":
        return torch.rsqrt(partials[0].sum(0) / N + eps), None
    count = segment_counts(N, kernel.stats_width(partials.device), partials.shape[1], partials.device)[:, None]
    total = partials[0]
    mean = total.sum(0) / N
    seg_mean = total / count.clamp(min=1)
    m2 = partials[1].sum(0) + (count * (seg_mean - mean) ** 2).sum(0)
    return torch.rsqrt(m2 / N + eps), mean


def fold_weight(w: Tensor, gamma: Optional[Tensor], w_kn: bool) -> Tensor:
    """W · diag(γ) along K, in W's dtype (γ may be fp32, e.g. Gemma's 1 + w)."""
    if gamma is None:
        return w
    return (w * (gamma[:, None] if w_kn else gamma)).to(w.dtype)


def column_sums(w_folded: Tensor, w_kn: bool) -> Tensor:
    """u[n] = Σ_k (W·γ)[n, k] of the rounded weight the GEMM multiplies with, in fp32: the mean correction then
    cancels the GEMM's μ term to fp32 accumulation error. The torch path (off the GPU; on it ``weight_fold``
    sums the rounded W·γ itself) takes 16-bit weights through an opaque op: traced into a graph, Inductor fuses a
    sum with the fold that rounds W·γ and adds the values from before their rounding (it elides a 16-bit
    downcast inside a kernel, even through a bit-cast round trip), an error of |μ|/σ times the weight's rounding."""
    if w_folded.dtype in (torch.float16, torch.bfloat16):
        return torch.ops.norm_fusion.column_sums(w_folded, w_kn)
    return _sum_columns(w_folded, w_kn)


def _sum_columns(w_folded: Tensor, w_kn: bool) -> Tensor:
    return w_folded.sum(0 if w_kn else 1, dtype=torch.float32)


# declared like epilogue_gemm (the low-level API: no custom_op layers per call on the host)
_LIB.define("column_sums(Tensor w_folded, bool w_kn) -> Tensor")
_LIB.impl("column_sums", _sum_columns, "CompositeExplicitAutograd")


@torch.library.register_fake("norm_fusion::column_sums", lib=_LIB)
def _(w_folded, w_kn):
    return w_folded.new_empty(w_folded.shape[1 if w_kn else 0], dtype=torch.float32)


def fold_bias(w: Tensor, beta: Optional[Tensor], bias: Optional[Tensor], w_kn: bool) -> Optional[Tensor]:
    """v = W β (+ b) in fp32: β pushed through the linear."""
    if beta is None:
        return bias
    v = (beta.float() @ w.float()) if w_kn else (w.float() @ beta.float())
    return v + bias.float() if bias is not None else v


def interleave(wg: Tensor, wu: Tensor, w_kn: bool) -> Tensor:
    """Gate and up rows (or columns, for [K, N] weights) interleaved: the epilogue sees (gate, up) pairs."""
    if w_kn:
        return torch.stack([wg, wu], dim=2).reshape(wg.shape[0], 2 * wg.shape[1])
    return torch.stack([wg, wu], dim=1).reshape(2 * wg.shape[0], wg.shape[1])


def fold_operands(w0: Tensor, w1: Optional[Tensor], gamma: Optional[Tensor], beta: Optional[Tensor],
                  b0: Optional[Tensor], b1: Optional[Tensor], w_kn: bool, need_u: bool):
    """A consumer GEMM's weight-side operands, (W', u, v): W' = W·diag(γ) (a gated pair's gate and up folded and
    interleaved), u its column sums (LayerNorm's mean correction; None unless ``need_u``), v = Wβ + b (None
    without β and bias). Depends on the weights alone: computed per call in training, kept by
    :func:`kept_fold` between calls in inference. Where u or Wβ is needed (LayerNorm), on the GPU (and eagerly in
    the Triton interpreter), one ``kernels.weight_fold`` launch per weight, traced as a direct launch: the torch
    ops take an opaque op for u and three passes over W. W·γ alone stays torch ops, one elementwise kernel
    Inductor fuses with the gate/up interleave (the Triton pass was slower at two of six shapes: BENCHMARKS.md)."""
    uses_kernel = w0.is_cuda or (interpret_mode() and not traced(w0))
    if uses_kernel and (need_u or beta is not None):
        return fold_with_kernel(w0, w1, gamma, beta, b0, b1, w_kn, need_u)
    return fold_with_torch_ops(w0, w1, gamma, beta, b0, b1, w_kn, need_u)


def fold_with_torch_ops(w0, w1, gamma, beta, b0, b1, w_kn: bool, need_u: bool):
    """:func:`fold_operands` in torch ops (Inductor fuses them, but for u's opaque op: ``column_sums``)."""
    pairs = [(w, b) for w, b in ((w0, b0), (w1, b1)) if w is not None]
    weights = [fold_weight(w, gamma, w_kn) for w, _ in pairs]
    biases = [fold_bias(w, beta, b, w_kn) for w, b in pairs]
    if w1 is not None:
        n = weights[0].shape[1 if w_kn else 0]
        w = interleave(weights[0], weights[1], w_kn)
        v = None
        if any(b is not None for b in biases):
            v = torch.stack([b.float() if b is not None else torch.zeros(n, device=w.device) for b in biases],
                            dim=1).reshape(2 * n)
    else:
        w, v = weights[0], biases[0]
    return w, column_sums(w, w_kn) if need_u else None, v


def fold_with_kernel(w0, w1, gamma, beta, b0, b1, w_kn: bool, need_u: bool):
    """:func:`fold_operands` as one ``weight_fold`` launch per weight (a gated pair's halves written interleaved)."""
    gated = w1 is not None
    if not gated and gamma is None and beta is None and not need_u:
        return w0, None, b0  # nothing to compute
    K, n = w0.shape if w_kn else (w0.shape[1], w0.shape[0])
    step = 2 if gated else 1
    w_out = (torch.empty((K, step * n) if w_kn else (step * n, K), device=w0.device, dtype=w0.dtype)
             if gated or gamma is not None else None)
    u = torch.empty(step * n, device=w0.device, dtype=torch.float32) if need_u else None
    has_v = beta is not None or (gated and (b0 is not None or b1 is not None))
    v = torch.empty(step * n, device=w0.device, dtype=torch.float32) if has_v else None
    for half, (w, b) in enumerate(((w0, b0), (w1, b1))[:step]):
        weight_fold.fold(w, gamma, beta, b if has_v else None, w_kn, w_out=w_out, u=u, v=v,
                         out_offset=half * (1 if w_kn else K), uv_offset=half, out_step=step)
    return (w_out if w_out is not None else w0), u, (v if has_v else b0)


# Inference: (the weights' identities) -> (the sources held, their versions, (W', u, v)). Holding the sources keeps
# their memory from being reused by another tensor at the same address while an entry lives.
_FOLDED: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
FOLDED_ENTRIES = 4096


def clear_folded_weights() -> None:
    """Drop every weight kept folded between calls (the memory of one copy of each consumer's weight)."""
    _FOLDED.clear()


def _identity(t: Tensor) -> tuple:
    return (t.data_ptr(), t.device, t.dtype, tuple(t.shape), t.stride(), t.storage_offset())


def kept_fold(w0: Tensor, w1: Optional[Tensor], gamma: Optional[Tensor], beta: Optional[Tensor],
              b0: Optional[Tensor], b1: Optional[Tensor], w_kn: bool, need_u: bool, sources: list[Tensor]):
    """:func:`fold_operands`, kept between calls while ``sources`` — the parameters that the weights, γ, β and
    biases are computed from — are the same tensors, unchanged in place (their version counters: an optimizer
    step, ``copy_`` or ``load_state_dict`` bumps them; an update through ``.data`` does not, so call
    :func:`clear_folded_weights` after one)."""
    if any(t.is_inference() for t in sources):  # no version counter to check against
        return fold_operands(w0, w1, gamma, beta, b0, b1, w_kn, need_u)
    key = (w_kn, need_u, w1 is None, gamma is None, beta is None, b0 is None, b1 is None,
           *(_identity(t) for t in sources))
    versions = tuple(t._version for t in sources)
    entry = _FOLDED.get(key)
    if entry is not None and entry[1] == versions:
        _FOLDED.move_to_end(key)
        return entry[2]
    result = fold_operands(w0, w1, gamma, beta, b0, b1, w_kn, need_u)
    _FOLDED[key] = (list(sources), versions, result)
    _FOLDED.move_to_end(key)
    while len(_FOLDED) > FOLDED_ENTRIES:
        _FOLDED.popitem(last=False)
    return result


def run_folded_epilogue_gemm(a, w0, w1, gamma, beta, b0, b1, sources, scale, shift, row_norm, activation,
                             write_aux, w_kn, backend="triton", head_dim=0, head_weight=None, head_eps=0.0,
                             rope_cos=None, rope_sin=None, head_eps_tensor=None, rope_interleaved=False,
                             rope_dim=0, head_gates=False, head_center=False):
    """A consumer's epilogue GEMM (:func:`run_epilogue_gemm`) with its weight-side operands W·γ, u, v from
    :func:`kept_fold`. One op, so the kept tensors never reach Inductor: an op's outputs are buffers it owns
    and may reuse or update in place after their last read, which corrupted a fold kept as an op's output."""
    w, u, v = kept_fold(w0, w1, gamma, beta, b0, b1, w_kn, row_norm == "ln", sources)
    return run_epilogue_gemm(a, w, v, None, scale, shift, u, row_norm, activation, write_aux, "none", w_kn,
                             backend=backend, head_dim=head_dim, head_weight=head_weight, head_eps=head_eps,
                             rope_cos=rope_cos, rope_sin=rope_sin, head_eps_tensor=head_eps_tensor,
                             rope_interleaved=rope_interleaved, rope_dim=rope_dim, head_gates=head_gates,
                             head_center=head_center)


# The pass uses it in inference graphs only (no backward, no CUDA graphs: a replayed graph runs no Python), with
# every source a parameter or buffer.
_LIB.define(
    "folded_epilogue_gemm(Tensor a, Tensor w0, Tensor? w1, Tensor? gamma, Tensor? beta, Tensor? b0, Tensor? b1, "
    "Tensor[] sources, Tensor? scale, Tensor? shift, str row_norm, str activation, bool write_aux, bool w_kn, "
    "str backend='triton', int head_dim=0, Tensor? head_weight=None, float head_eps=0.0, Tensor? rope_cos=None, "
    "Tensor? rope_sin=None, Tensor? head_eps_tensor=None, bool rope_interleaved=False, int rope_dim=0, "
    "bool head_gates=False, bool head_center=False) -> (Tensor, Tensor, Tensor)",
    tags=STREAM_INPUT_TAGS)
_LIB.impl("folded_epilogue_gemm", run_folded_epilogue_gemm, "CompositeExplicitAutograd")


@torch.library.register_fake("norm_fusion::folded_epilogue_gemm", lib=_LIB)
def _(a, w0, w1, gamma, beta, b0, b1, sources, scale, shift, row_norm, activation, write_aux, w_kn,
      backend="triton", head_dim=0, head_weight=None, head_eps=0.0, rope_cos=None, rope_sin=None,
      head_eps_tensor=None, rope_interleaved=False, rope_dim=0, head_gates=False, head_center=False):
    folded = w0 if w1 is None else (w0.new_empty(w0.shape[0], 2 * w0.shape[1]) if w_kn
                                    else w0.new_empty(2 * w0.shape[0], w0.shape[1]))
    return _epilogue_gemm_fake(a, folded, None, None, scale, shift, None, row_norm, activation, write_aux, "none",
                               w_kn)
