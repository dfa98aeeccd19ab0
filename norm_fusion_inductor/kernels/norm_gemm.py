"""RMSNorm and LayerNorm fused into a persistent TMA GEMM: as its prologue (pre-norm, "Lazy Pre-Norm") or its
epilogue (post-norm). One mainloop; the variants are constexpr flags.

Math (design.md §1.1). With x [M, K], γ [K], W [N, K], b [N]:

    rmsnorm(x) Wᵀ + b = rstd[:, None] · ((x · γ) Wᵀ) + b,     rstd = rsqrt(mean(x², -1) + eps)

A row scale commutes with the matmul, so the kernel never writes the normalized tensor:

* mainloop: for each K tile it loads the x tile (TMA), accumulates Σx² of its rows in fp32 from the tile it
  already holds, scales the tile by γ[k-tile] (a per-column scale, independent of the reduction) and feeds it to
  the tensor cores;
* epilogue: acc · rstd[:, None] (+ b), stored through TMA; the CTAs of the first N tile also store rstd (M fp32)
  for backward.

That is the "in-loop" prologue. Its cost is the x tile's trip through registers every K step (for Σx² and γ),
which the wgmma pipeline does not hide well at large K (measured: +25–35% over the plain GEMM at K ≥ 1024 on the
H200). So there is a second prologue, "pre-pass": a row-reduction kernel reads x once for rstd (M floats out),
γ is folded into the weight (W·γ, N·K elements), and the same GEMM mainloop runs with A straight from shared
memory and scales rows by the loaded rstd in its epilogue. The normalized tensor is never written by either; the
pre-pass reads x twice. ``rms_norm_matmul`` times both (each with its block configs) per shape and keeps the
faster.

LayerNorm (design.md §1.2), with u = W γ and v = W β + b (N floats each, computed per call):

    LN(x) Wᵀ + b = rstd · ((x − μ)·γ) Wᵀ + v = rstd · (((x − s)·γ) Wᵀ − (μ − s)·u) + v

* in-loop: s = x[m, 0]; the loop sums (x − s) and (x − s)² (no cancellation when |μ| ≫ σ, since x − s is of
  the order of σ) and feeds (x − s)·γ to the tensor cores; the epilogue applies rstd · (acc − (μ − s)·u) + v;
* pre-pass: the row kernel writes μ and rstd (same shifted sums); the GEMM runs on raw x against W·γ and the
  epilogue applies rstd · (acc − μ·u) + v with u the column sums of the *rounded* W·γ the GEMM used, so the two
  large terms cancel to fp32 accumulation error (∝ |μ|/σ), not to bf16 rounding.

Post-norm (design.md §1.3), the norm of the GEMM's output row, z = x Wᵀ + b (+ residual):

    RMSNorm: y = z · rsqrt(mean(z²) + eps) · γ        LayerNorm: y = (z − μ) · rsqrt(var(z) + eps) · γ + β

(+ residual_out, a residual added after the norm: x + norm(o_proj(a)) in sandwich-norm models.)

The epilogue adds the residual tile, optionally stores z (the residual stream, or what the backward reads), and
needs the statistics of whole rows: the tile holds them (BLOCK_N ≥ N, so N ≤ 256, TMA's largest box), and the
statistics are exact two-pass sums in registers. Wider rows are the regrouped rewrite's (the producer GEMM writes
per-tile partial sums in its epilogue, the readers normalize on load: epilogue_gemm.py); the cross-CTA exchanges
this kernel had for them (a cooperative spin, a last-arriver pass) measured slower than the unfused graph at
every N > 256 on the H200 and were removed.

The GEMM is Triton's persistent tensor-descriptor matmul: a grid of at most NUM_SMS programs, each walking
output tiles in grouped (GROUP_M) order so consecutive tiles share A/B in L2. With ROW_STATS=False and
HAS_GAMMA=False it is a plain GEMM, which the benchmark uses to measure the cost of the prologue.

The pre-norm prologues also run on a second, hand-scheduled mainloop written in Gluon (``norm_gemm_gluon``:
the next tile's loads overlap this tile's epilogue, and the in-loop statistics read the x tile from shared memory
beside an asynchronous wgmma, with γ folded into W): plans named "gluon_in_loop" / "gluon_pre_pass", offered on
sm_90 for 16-bit inputs with W [N, K], and timed against the plans above like any other. Inductor cannot emit
Gluon kernels into its generated code: a traced Gluon plan launches through a thin custom op (its module doc).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

# module-level names so that tests can stand in for the device queries (no GPU to ask)
from .common import ensure_allocator as _ensure_allocator
from .common import interpret_mode as _env_interpret
from .common import m_bucket as _bucket
from .common import num_sms as _num_sms
from .common import fastest_config, launcher, tile_coords, unused_pointer
from .row_norm import POST_NORM_MAX_N, row_stats, unsupported_shape_reason


@triton.jit
def norm_gemm_kernel(
    x_ptr, w_ptr, out_ptr, gamma_ptr, bias_ptr, rstd_ptr, mean_ptr, u_ptr,
    res_ptr, z_ptr, post_w_ptr, post_b_ptr, res_out_ptr,
    M, N, K, inv_k, eps,
    stride_xm, stride_wn, stride_om,
    ROW_STATS: tl.constexpr,  # accumulate Σx² and scale rows by rstd (RMSNorm prologue)
    ROW_SCALE: tl.constexpr,  # scale rows by rstd read from rstd_ptr (computed by the pre-pass)
    CENTER: tl.constexpr,  # LayerNorm: subtract the row mean through u = column sums of W·γ (see module doc)
    W_KN: tl.constexpr,  # the weight is stored [K, N] (x @ W, GPT-2's Conv1D) instead of [N, K] (x @ Wᵀ)
    HAS_GAMMA: tl.constexpr,  # scale the A tile's columns by γ
    HAS_BIAS: tl.constexpr,
    WRITE_RSTD: tl.constexpr,
    DOT_PRECISION: tl.constexpr,  # "tf32" / "ieee" for fp32 inputs; ignored for 16-bit ones
    POST_NORM: tl.constexpr,  # 0 none, 1 RMSNorm, 2 LayerNorm of the output rows (epilogue; module doc)
    HAS_RESIDUAL: tl.constexpr,  # z = x Wᵀ + b + residual [M, N] (row stride stride_om)
    WRITE_Z: tl.constexpr,  # store z [M, N] (row stride stride_om)
    HAS_POST_WEIGHT: tl.constexpr, HAS_POST_BIAS: tl.constexpr,
    HAS_RESIDUAL_OUT: tl.constexpr,  # y = norm(z) + residual_out [M, N] (a residual added after the norm)
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no K tile reaches past K
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr,
):
    dtype = out_ptr.dtype.element_ty
    # Inductor passes Python floats as fp64 scalars (Triton's own launcher: fp32); fp64 statistics spilled
    # registers and slowed the kernel markedly (docs/decisions.md#norm_gemmnorm_gemm_kernel)
    inv_k, eps = tl.cast(inv_k, tl.float32), tl.cast(eps, tl.float32)
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
    if W_KN:
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[K, N], strides=[stride_wn, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    else:
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[stride_om, 1],
                                       block_shape=[BLOCK_M, BLOCK_N])
    if POST_NORM != 0:
        # the residual and z through TMA too (pointer accesses in the accumulator's layout are 4-byte scattered
        # loads); a flag that is off gets a descriptor of out, never used
        r_desc = tl.make_tensor_descriptor(res_ptr if HAS_RESIDUAL else out_ptr, shape=[M, N],
                                           strides=[stride_om, 1], block_shape=[BLOCK_M, BLOCK_N])
        z_desc = tl.make_tensor_descriptor(z_ptr if WRITE_Z else out_ptr, shape=[M, N], strides=[stride_om, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])
        ro_desc = tl.make_tensor_descriptor(res_out_ptr if HAS_RESIDUAL_OUT else out_ptr, shape=[M, N],
                                            strides=[stride_om, 1], block_shape=[BLOCK_M, BLOCK_N])

    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n

    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        # x² is summed elementwise into a register tile and reduced across the tile once after the loop:
        # a row reduction per K step would put warp shuffles on the mainloop's critical path.
        sum_sq = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
        if ROW_STATS and CENTER:
            # shift each row by its first element: sums of (x − s) do not cancel when |mean| ≫ std
            offs_m = off_m + tl.arange(0, BLOCK_M)
            shift = tl.load(x_ptr + offs_m * stride_xm, mask=offs_m < M, other=0.0).to(tl.float32)
            sum_x = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = x_desc.load([off_m, off_k])  # out-of-bounds rows/columns read as 0: harmless for Σx² and the dot
            if W_KN:
                b = w_desc.load([off_k, off_n])
            else:
                b = w_desc.load([off_n, off_k]).T
            if ROW_STATS or HAS_GAMMA:
                a32 = a.to(tl.float32)
                if ROW_STATS and CENTER:
                    a32 = a32 - shift[:, None]
                    if not EVEN_K:  # columns past K read 0 through TMA: x − s would add −s to the sums there
                        offs_k = off_k + tl.arange(0, BLOCK_K)
                        a32 = tl.where(offs_k[None, :] < K, a32, 0.0)
                    sum_x += a32
                if ROW_STATS:
                    sum_sq += a32 * a32
                if HAS_GAMMA:
                    offs_k = off_k + tl.arange(0, BLOCK_K)
                    g = tl.load(gamma_ptr + offs_k, mask=offs_k < K, other=0.0).to(tl.float32)
                    a = (a32 * g[None, :]).to(a.dtype)
            acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)

        if ROW_STATS:
            if CENTER:  # acc holds Σ (x−s)·γ·W; with μ' = mean(x − s): rstd · (acc − μ'·u)
                mean_shifted = tl.sum(sum_x, axis=1) * inv_k
                var = tl.sum(sum_sq, axis=1) * inv_k - mean_shifted * mean_shifted
                rstd = tl.math.rsqrt(tl.maximum(var, 0.0) + eps)
                offs_n = off_n + tl.arange(0, BLOCK_N)
                u = tl.load(u_ptr + offs_n, mask=offs_n < N, other=0.0)
                acc = (acc - mean_shifted[:, None] * u[None, :]) * rstd[:, None]
            else:
                rstd = tl.math.rsqrt(tl.sum(sum_sq, axis=1) * inv_k + eps)
                acc = acc * rstd[:, None]
            if WRITE_RSTD:
                if pid_n == 0:
                    offs_m = off_m + tl.arange(0, BLOCK_M)
                    tl.store(rstd_ptr + offs_m, rstd, mask=offs_m < M)
                    if CENTER:
                        tl.store(mean_ptr + offs_m, shift + mean_shifted, mask=offs_m < M)
        if ROW_SCALE:
            offs_m = off_m + tl.arange(0, BLOCK_M)
            row_rstd = tl.load(rstd_ptr + offs_m, mask=offs_m < M, other=0.0)
            if CENTER:  # acc holds Σ x·(W·γ): rstd · (acc − μ·u), u the column sums of the same rounded W·γ
                row_mean = tl.load(mean_ptr + offs_m, mask=offs_m < M, other=0.0)
                offs_n = off_n + tl.arange(0, BLOCK_N)
                u = tl.load(u_ptr + offs_n, mask=offs_n < N, other=0.0)
                acc = (acc - row_mean[:, None] * u[None, :]) * row_rstd[:, None]
            else:
                acc = acc * row_rstd[:, None]
        if HAS_BIAS:
            offs_n = off_n + tl.arange(0, BLOCK_N)
            bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
            acc = acc + bias[None, :]
        if POST_NORM != 0:
            _post_norm_epilogue(acc, o_desc, r_desc, z_desc, ro_desc, out_ptr, post_w_ptr, post_b_ptr, rstd_ptr,
                                mean_ptr, off_m, off_n, M, N, eps, POST_NORM == 2, HAS_RESIDUAL, WRITE_Z, HAS_POST_WEIGHT,
                                HAS_POST_BIAS, HAS_RESIDUAL_OUT, BLOCK_M, BLOCK_N)
        else:
            o_desc.store([off_m, off_n], acc.to(dtype))


@triton.jit
def _post_norm_epilogue(acc, o_desc, r_desc, z_desc, ro_desc, out_ptr, post_w_ptr, post_b_ptr, rstd_ptr, mean_ptr,
                        off_m, off_n, M, N, eps, LAYER_NORM: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                        WRITE_Z: tl.constexpr, HAS_POST_WEIGHT: tl.constexpr, HAS_POST_BIAS: tl.constexpr,
                        HAS_RESIDUAL_OUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """z = acc (+ residual) → y = norm(z) over whole rows (the tile holds them), stored with the statistics."""
    dtype = out_ptr.dtype.element_ty
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    in_tile = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if HAS_RESIDUAL:
        acc += r_desc.load([off_m, off_n]).to(tl.float32)
    z = tl.where(in_tile, acc, 0.0)
    if WRITE_Z:
        z_desc.store([off_m, off_n], z.to(dtype))
    mean, var = _tile_moments(z, offs_n, N, LAYER_NORM)
    rstd = tl.math.rsqrt(var + eps)
    _store_stats(rstd_ptr, mean_ptr, offs_m, M, mean, rstd, LAYER_NORM)
    y = _normalize(z, mean, rstd, post_w_ptr, post_b_ptr, offs_n, N, LAYER_NORM, HAS_POST_WEIGHT, HAS_POST_BIAS)
    if HAS_RESIDUAL_OUT:
        y += ro_desc.load([off_m, off_n]).to(tl.float32)
    o_desc.store([off_m, off_n], y.to(dtype))


@triton.jit
def _store_stats(rstd_ptr, mean_ptr, offs_m, M, mean, rstd, LAYER_NORM: tl.constexpr):
    tl.store(rstd_ptr + offs_m, rstd, mask=offs_m < M)
    if LAYER_NORM:
        tl.store(mean_ptr + offs_m, mean, mask=offs_m < M)


@triton.jit
def _tile_moments(z, offs_n, N, LAYER_NORM: tl.constexpr):
    """Row mean and variance (LayerNorm, two passes over the registers) or mean square (RMSNorm) of a tile
    holding whole rows; z is 0 outside them."""
    if LAYER_NORM:
        mean = tl.sum(z, axis=1) / N
        d = tl.where(offs_n[None, :] < N, z - mean[:, None], 0.0)
        return mean, tl.sum(d * d, axis=1) / N
    return tl.zeros_like(tl.sum(z, axis=1)), tl.sum(z * z, axis=1) / N


@triton.jit
def _normalize(z, mean, rstd, post_w_ptr, post_b_ptr, offs_n, N, LAYER_NORM: tl.constexpr,
               HAS_POST_WEIGHT: tl.constexpr, HAS_POST_BIAS: tl.constexpr):
    if LAYER_NORM:
        y = (z - mean[:, None]) * rstd[:, None]
    else:
        y = z * rstd[:, None]
    if HAS_POST_WEIGHT:
        y = y * tl.load(post_w_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if HAS_POST_BIAS:
        y = y + tl.load(post_b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    return y


# Hopper configs. BLOCK_M=128 is one wgmma warpgroup tile per 4 warps; the K tile is 64 or 128 (128 B or 256 B
# rows for 16-bit types, what TMA swizzles best); BLOCK_N 128/256 trades L2 reuse against registers.
_GPU_CONFIGS = [
    dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_stages=s, num_warps=w, WARP_SPECIALIZE=False,
         FLATTEN=fl)
    for (bm, bn, bk, s, w, fl) in [
        (128, 256, 64, 3, 8, False),
        (128, 256, 64, 3, 8, True),
        (128, 128, 64, 4, 4, True),
        (128, 128, 64, 4, 8, False),
        (128, 128, 128, 3, 8, False),
    ]
]
# Warp specialization (tl.range(..., warp_specialize=True)) is left out: in Triton 3.6 its pass failed to compile
# the row-statistics variant on sm_90 (NVGPUWarpSpecialization), see NOTES.md and
# docs/decisions.md#norm_gemm_gpu_configs
# Small blocks for the CPU interpreter: it runs one program at a time in numpy.
_INTERPRETER_CONFIG = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_stages=1, num_warps=1,
                           WARP_SPECIALIZE=False, FLATTEN=False)


_TUNED: dict = {}


@dataclasses.dataclass
class RowNorm:
    """Operands of an epilogue that needs whole output rows (module doc): the post-norm, y = norm(x Wᵀ + b +
    residual) to ``out``."""

    layer_norm: bool
    residual: torch.Tensor | None = None  # [M, N], row stride N
    residual_out: torch.Tensor | None = None  # [M, N], added after the norm
    z: torch.Tensor | None = None  # [M, N] to store z in, or None
    weight: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    mean: torch.Tensor | None = None  # [M] fp32, LayerNorm (written by the post-norm)


def _launch(x, w, out, gamma, bias, rstd, eps, cfg, row_stats=False, row_scale=False, mean=None, u=None,
            w_kn=False, post: RowNorm | None = None):
    M, K = x.shape
    N = out.shape[1]
    if x.is_cuda:
        num_sms = _num_sms(x.device.index or 0)
        _ensure_allocator()
    else:
        num_sms = 4
    n_tiles = triton.cdiv(N, cfg["BLOCK_N"])
    grid_size = min(num_sms, triton.cdiv(M, cfg["BLOCK_M"]) * n_tiles)
    dot_precision = "ieee"
    if x.dtype == torch.float32 and x.is_cuda and torch.backends.cuda.matmul.allow_tf32:
        dot_precision = "tf32"
    dummy = unused_pointer(x)  # never read or written: the flags that would touch it are off
    post_args = (dummy,) * 5
    if post is not None:
        assert n_tiles == 1, "the post-norm needs whole rows in a tile (BLOCK_N >= N)"
        post_args = tuple(t if t is not None else dummy
                          for t in (post.residual, post.z, post.weight, post.bias, post.residual_out))
        mean = post.mean
    launcher(norm_gemm_kernel, x)[(grid_size,)](
        x, w, out,
        *(t if t is not None else dummy for t in (gamma, bias, rstd, mean, u)),
        *post_args,
        M, N, K, 1.0 / K, eps,
        x.stride(0), w.stride(0), out.stride(0),
        ROW_STATS=row_stats, ROW_SCALE=row_scale, CENTER=mean is not None and post is None, W_KN=w_kn,
        HAS_GAMMA=gamma is not None, HAS_BIAS=bias is not None, WRITE_RSTD=row_stats and rstd is not None,
        DOT_PRECISION=dot_precision,
        POST_NORM=0 if post is None else 2 if post.layer_norm else 1,
        HAS_RESIDUAL=post is not None and post.residual is not None,
        WRITE_Z=post is not None and post.z is not None,
        HAS_POST_WEIGHT=post is not None and post.weight is not None,
        HAS_POST_BIAS=post is not None and post.bias is not None,
        HAS_RESIDUAL_OUT=post is not None and post.residual_out is not None,
        EVEN_K=K % cfg["BLOCK_K"] == 0, NUM_SMS=num_sms, **cfg,
    )


def _run(plan, x, w, out, rstd, eps, gamma=None, bias=None, mean=None, beta=None, w_kn=False):
    """Run one plan: ("in_loop" | "pre_pass" | "plain", block config). With ``mean`` given it is LayerNorm
    (γ, β optional), else RMSNorm. ``w_kn``: w is stored [K, N] (x @ w) instead of [N, K] (x @ wᵀ)."""
    plan = Plan.of(plan)
    prologue, cfg = plan.placement, plan.config
    center = mean is not None
    k_dim = 0 if w_kn else 1  # w's K axis
    if center:  # β and the linear's bias become one epilogue bias: v = W β + b (fp32)
        bias = _fold_bias(w, beta, bias, k_dim)
    if plan.gluon:  # the same prologue on the hand-scheduled Hopper mainloop
        from . import norm_gemm_gluon

        return norm_gemm_gluon.run(prologue, cfg, x, _fold(w, gamma, k_dim), out, rstd, eps, bias, mean,
                                   w_kn)
    if prologue == "in_loop":
        if gamma is None:
            # The x tile must reach the tensor cores through registers (where Σx² reads it): fed straight from
            # shared memory next to the register read, Triton 3.6 miscompiled it on sm_90 (wrong results in
            # bf16/fp16; docs/decisions.md#norm_gemm_run). A γ of ones takes the register path.
            gamma = torch.ones(x.shape[1], device=x.device, dtype=x.dtype)
        u = _matvec(w, gamma, k_dim) if center else None  # u[n] = Σ_k W[n, k] γ[k]
        _launch(x, w, out, gamma, bias, rstd, eps, cfg, row_stats=True, mean=mean, u=u, w_kn=w_kn)
    elif prologue == "pre_pass":
        row_stats(x, rstd, mean, eps)
        w_eff = _fold(w, gamma, k_dim)  # γ folded into the weight: A goes straight to the wgmma
        # column sums of the rounded W·γ the GEMM uses, accumulated in fp32 without an fp32 copy of W
        u = w_eff.sum(k_dim, dtype=torch.float32) if center else None
        _launch(x, w_eff, out, None, bias, rstd, eps, cfg, row_scale=True, mean=mean, u=u, w_kn=w_kn)
    else:  # "plain": the bare GEMM (x·γ folded the same way), to measure what the prologues cost
        _launch(x, _fold(w, gamma, k_dim), out, None, bias, None, eps, cfg, w_kn=w_kn)


def _matvec(w, v, k_dim):
    """Σ_k W[n, k] v[k] in fp32, for w stored [N, K] (k_dim 1) or [K, N] (k_dim 0)."""
    return w.float() @ v.float() if k_dim == 1 else v.float() @ w.float()


def _fold(w, gamma, k_dim=1):
    """W · diag(γ) along K, in W's dtype (γ may be fp32, e.g. Gemma's 1 + w)."""
    if gamma is None:
        return w
    return (w * (gamma if k_dim == 1 else gamma[:, None])).to(w.dtype)


def _fold_bias(w, beta, bias, k_dim=1):
    """v = W β (+ b): β pushed through the linear, in fp32."""
    if beta is None:
        return bias
    v = _matvec(w, beta, k_dim)
    return v + bias.float() if bias is not None else v


def supports(x: torch.Tensor, w: torch.Tensor, w_kn: bool = False, center: bool = False) -> str | None:
    """None if the kernel can run these operands, else the reason it cannot (logged by the caller)."""
    if x.dim() != 2 or w.dim() != 2:
        return "kernel takes 2-D operands"
    if w.dtype != x.dtype:
        return f"weight dtype {w.dtype} differs from input dtype {x.dtype}"
    if x.device.type != "cuda" and not _env_interpret():
        return f"no Triton kernel for device {x.device.type}"
    reason = unsupported_shape_reason(x.dtype, x.shape[1], w.shape[1 if w_kn else 0], x.device, center)
    if reason is not None:
        return reason
    for name, t in (("input", x), ("weight", w)):
        if t.stride(-1) != 1:
            return f"{name} is not contiguous in its last dim"
        if (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            return f"{name} rows are not 16-byte aligned (TMA)"
    return None


PROLOGUES = ("in_loop", "pre_pass")
GLUON = "gluon_"  # prefix of the plans that run on norm_gemm_gluon's mainloop (sm_90, 16-bit, W [N, K])
ALL_PROLOGUES = PROLOGUES + tuple(GLUON + p for p in PROLOGUES)


class Plan(NamedTuple):
    """One way to run a fused site: ``kernel`` names the norm's placement ("in_loop", "pre_pass" for pre-norm,
    "row" for post-norm), prefixed ``gluon_`` where it runs on norm_gemm_gluon's mainloop; ``config`` is the
    block config. A tuple, so it is stored as [kernel, config] in the selection's JSON cache."""

    kernel: str
    config: dict

    @classmethod
    def of(cls, plan) -> Optional["Plan"]:
        """A Plan from a stored [kernel, config] (None stays None)."""
        return None if plan is None else cls(*plan)

    @property
    def gluon(self) -> bool:
        """Runs on the Gluon mainloop (launched from Python through its thin op), not on one Inductor launches."""
        return self.kernel.startswith(GLUON)

    @property
    def placement(self) -> str:
        """The norm's placement without the mainloop: "in_loop", "pre_pass" or "row"."""
        return self.kernel.removeprefix(GLUON)

    def __str__(self) -> str:
        cfg = self.config
        return f"{self.kernel} {cfg.get('BLOCK_M')}x{cfg.get('BLOCK_N')}x{cfg.get('BLOCK_K')}"


def _candidate_plans(x: torch.Tensor, center: bool = False, w_kn: bool = False) -> list[tuple]:
    prologues = PROLOGUES
    if center and x.dtype == torch.float32:
        # LayerNorm pre-pass: its mean correction cancels to fp32 accumulation error ∝ |μ|/σ, measured 3.5x the
        # unfused error at |μ| = 1000σ in fp32 (16-bit inputs: within it). The in-loop shift has no such term.
        prologues = ("in_loop",)
    if not x.is_cuda:
        return [Plan(prologue, _INTERPRETER_CONFIG) for prologue in prologues]
    configs = _GPU_CONFIGS
    if x.dtype == torch.float32:  # 4-byte elements: halve K tiles to stay within shared memory
        configs = [dict(c, BLOCK_K=min(c["BLOCK_K"], 32)) for c in _GPU_CONFIGS]
    K = x.shape[1]
    # LayerNorm in-loop with a K tile past K: on sm_90 (Triton 3.6) the tl.where that zeroes those columns of
    # x − s made some configs wrong even where K is a multiple of BLOCK_K and the where selects nothing; without
    # it every config was right (docs/decisions.md#norm_gemm_candidate_plans). So the GPU runs it only where
    # K % BLOCK_K == 0 (the kernel then has no where).
    plans = [Plan(prologue, cfg) for prologue in prologues for cfg in configs
             if not (center and prologue == "in_loop" and K % cfg["BLOCK_K"])]
    from . import norm_gemm_gluon

    return plans + [Plan(GLUON + prologue, cfg) for prologue in prologues
                    for cfg in norm_gemm_gluon.CONFIGS + norm_gemm_gluon.OFFERED_WS
                    if norm_gemm_gluon.unsupported_reason(x.dtype, x.device, K, cfg, prologue, center, w_kn) is None]


def tuned_plan(x, w, gamma, bias, eps, prologues=ALL_PROLOGUES, beta=None, center=False, w_kn=False) -> tuple:
    """Time every (prologue, config) once per (M bucket, N, K, dtype, flags) and cache the fastest."""
    M, K = x.shape
    N = w.shape[1 if w_kn else 0]
    key = (_bucket(M), N, K, x.dtype, x.device.type, gamma is not None, bias is not None, beta is not None,
           center, w_kn, tuple(prologues))
    if key in _TUNED:
        return _TUNED[key]
    plans = [p for p in _candidate_plans(x, center, w_kn) if p.kernel in prologues]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    rstd = torch.empty(M, device=x.device, dtype=torch.float32)
    mean = torch.empty(M, device=x.device, dtype=torch.float32) if center else None
    return _fastest(key, plans, lambda plan: _run(plan, x, w, out, rstd, eps, gamma=gamma, bias=bias, mean=mean,
                                                  beta=beta, w_kn=w_kn), timed=x.is_cuda)


def _fastest(key, plans: list, run, timed: bool) -> tuple:
    """The fastest of ``plans`` by ``run(plan)``, cached under ``key``; the first one untimed (interpreter)."""
    if key in _TUNED:
        return _TUNED[key]
    if not timed:
        _TUNED[key] = plans[0]  # the interpreter cannot time anything meaningful
        return plans[0]
    # GPU time only (graph replay): tuning may run inside Inductor's compile, where host-side overhead is
    # inflated by the Python dispatcher and would pick configs by launch cost
    _TUNED[key] = fastest_config(plans, run, f"norm_gemm {key}")
    return _TUNED[key]


def rms_norm_matmul(x: torch.Tensor, gamma: torch.Tensor | None, w: torch.Tensor, bias: torch.Tensor | None,
                    eps: float, *, plan: tuple | None = None, w_kn: bool = False):
    """out = rmsnorm(x; γ, eps) @ wᵀ + bias and rstd [M] (fp32); x [M, K], w [N, K] (or [K, N] with w_kn: x @ w).

    ``plan`` = (prologue, block config) forces one variant (tests, benchmarks); by default the fastest measured
    one. The prologue "plain" runs the bare GEMM without the norm (rstd is then left unwritten)."""
    M, K = x.shape
    out = torch.empty(M, w.shape[1 if w_kn else 0], device=x.device, dtype=x.dtype)
    rstd = torch.empty(M, device=x.device, dtype=torch.float32)
    if M == 0:
        return out, rstd
    gamma = gamma.contiguous() if gamma is not None else None
    bias = bias.contiguous() if bias is not None else None
    plan = plan or tuned_plan(x, w, gamma, bias, eps, w_kn=w_kn)
    _run(plan, x, w, out, rstd, eps, gamma=gamma, bias=bias, w_kn=w_kn)
    return out, rstd


def layer_norm_matmul(x: torch.Tensor, gamma: torch.Tensor | None, beta: torch.Tensor | None, w: torch.Tensor,
                      bias: torch.Tensor | None, eps: float, *, plan: tuple | None = None, w_kn: bool = False):
    """out = layernorm(x; γ, β, eps) @ wᵀ + bias, mean [M] and rstd [M] (fp32); x [M, K], w [N, K] (or [K, N]
    with w_kn).

    LN(x) Wᵀ + b = rstd · ((x − μ)·γ) Wᵀ + (W β + b) (design.md §1.2); the kernel gets (x − μ) through the
    column sums u of W·γ and never writes the normalized tensor."""
    M, K = x.shape
    out = torch.empty(M, w.shape[1 if w_kn else 0], device=x.device, dtype=x.dtype)
    rstd = torch.empty(M, device=x.device, dtype=torch.float32)
    mean = torch.empty(M, device=x.device, dtype=torch.float32)
    if M == 0:
        return out, mean, rstd
    gamma, beta, bias = (t.contiguous() if t is not None else None for t in (gamma, beta, bias))
    plan = plan or tuned_plan(x, w, gamma, bias, eps, beta=beta, center=True, w_kn=w_kn)
    _run(plan, x, w, out, rstd, eps, gamma=gamma, bias=bias, mean=mean, beta=beta, w_kn=w_kn)
    return out, mean, rstd


# --- post-norm: y = norm(x Wᵀ + b + residual) -------------------------------------------------------------------

def _post_candidate_plans(x: torch.Tensor, N: int) -> list[tuple]:
    """("row", block config): tiles that hold whole rows (N ≤ 256, TMA's largest box; module doc)."""
    if N > POST_NORM_MAX_N:
        return []
    if not x.is_cuda:
        return [("row", dict(_INTERPRETER_CONFIG, BLOCK_N=max(16, triton.next_power_of_2(N))))]
    bk = 32 if x.dtype == torch.float32 else 64
    bn = max(64, triton.next_power_of_2(N))
    # (flattened row configs: 128x256 with 3 stages needs 272 KB of shared memory, over the H200's 227 KB;
    # flattened persistent loops measured slower: docs/decisions.md#norm_gemm_post_candidate_plans)
    return [Plan("row", dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_stages=st, num_warps=w,
                         WARP_SPECIALIZE=False, FLATTEN=False))
            for bm, st, w in ((128, 3, 8), (64, 4, 4))]


def _run_post(plan, x, w, out, z, mean, rstd, bias, residual, norm_weight, norm_bias, eps, layer_norm, w_kn,
              residual_out=None):
    plan = Plan.of(plan)
    if plan.gluon:  # the whole-row epilogue on the hand-scheduled Hopper mainloop
        from . import norm_gemm_gluon

        return norm_gemm_gluon.post_run(plan.config, x, w, out, z, mean, rstd, bias, residual, norm_weight, norm_bias,
                                        eps, layer_norm, w_kn, residual_out)
    post = RowNorm(layer_norm, residual=residual, z=z, weight=norm_weight, bias=norm_bias, mean=mean,
                   residual_out=residual_out)
    _launch(x, w, out, None, bias, rstd, eps, plan.config, w_kn=w_kn, post=post)


def _post_plans(x, N: int, w_kn: bool, gluon: bool) -> list[tuple]:
    """The post-norm's candidates: the Triton row plans, and with ``gluon`` the Gluon ones where they run."""
    plans = _post_candidate_plans(x, N)
    if gluon and x.is_cuda:
        from . import norm_gemm_gluon

        M, K = x.shape
        plans += [Plan(GLUON + "row", cfg) for cfg in norm_gemm_gluon.POST_CONFIGS
                  if norm_gemm_gluon.post_unsupported_reason(x.dtype, x.device, M, K, N, cfg, w_kn) is None]
    return plans


def post_tuned_plan(x, w, bias, residual, norm_weight, norm_bias, eps, *, layer_norm, write_z=False, w_kn=False,
                    residual_out=None, gluon=True):
    """Time every (mainloop, config) once per (M bucket, N, K, dtype, flags) and cache the fastest; ``gluon``:
    the Gluon mainloop's row plans compete too (norm_gemm_gluon.POST_CONFIGS, where they run)."""
    M, K = x.shape
    N = w.shape[1 if w_kn else 0]
    key = ("post", _bucket(M), N, K, x.dtype, x.device.type, layer_norm, write_z, w_kn, gluon,
           *(t is not None for t in (bias, residual, norm_weight, norm_bias, residual_out)))
    if key in _TUNED:
        return _TUNED[key]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    z = torch.empty_like(out) if write_z else None
    rstd = torch.empty(M, device=x.device, dtype=torch.float32)
    mean = torch.empty_like(rstd) if layer_norm else None
    return _fastest(key, _post_plans(x, N, w_kn, gluon), lambda plan: _run_post(
        plan, x, w, out, z, mean, rstd, bias, residual, norm_weight, norm_bias, eps, layer_norm, w_kn, residual_out),
        timed=x.is_cuda)


def matmul_norm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                norm_weight: torch.Tensor | None, norm_bias: torch.Tensor | None, eps: float, *, layer_norm: bool,
                write_z: bool = False, plan: tuple | None = None, w_kn: bool = False,
                residual_out: torch.Tensor | None = None):
    """y = norm(z) (+ residual_out), z = x @ wᵀ + bias + residual, RMSNorm or (``layer_norm``) LayerNorm over z's
    rows, with the norm's weight and bias; x [M, K], w [N, K] (or [K, N] with w_kn), residual and residual_out
    [M, N] contiguous.

    Returns (y, z if ``write_z`` else None, mean [M] fp32 (LayerNorm) or None, rstd [M] fp32). ``plan`` =
    ("row" or the Gluon row, block config) forces a variant (tests, benchmarks); by default the fastest measured
    one. N ≤ 256 (whole rows in a tile)."""
    M, K = x.shape
    N = w.shape[1 if w_kn else 0]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    z = torch.empty(M, N, device=x.device, dtype=x.dtype) if write_z else None
    rstd = torch.empty(M, device=x.device, dtype=torch.float32)
    mean = torch.empty(M, device=x.device, dtype=torch.float32) if layer_norm else None
    if M == 0:
        return out, z, mean, rstd
    bias, residual, norm_weight, norm_bias, residual_out = (
        t.contiguous() if t is not None else None for t in (bias, residual, norm_weight, norm_bias, residual_out))
    plan = plan or post_tuned_plan(x, w, bias, residual, norm_weight, norm_bias, eps, layer_norm=layer_norm,
                                   write_z=write_z, w_kn=w_kn, residual_out=residual_out)
    _run_post(plan, x, w, out, z, mean, rstd, bias, residual, norm_weight, norm_bias, eps, layer_norm, w_kn,
              residual_out)
    return out, z, mean, rstd


