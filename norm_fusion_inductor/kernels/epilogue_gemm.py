"""One persistent TMA GEMM whose epilogue is composed of small pieces selected by constexpr: the GEMM of the
regrouped normalization (docs/design.md §4).

    out = act(z),   z = ROW_NORM(a · wᵀ) + bias + residual,   partials = per-(row, column segment) sums of z

a [M, K], w [N, K] (or [K, N] with W_KN), all row-major with unit last stride. The pieces, in epilogue order:

* ``ROW_NORM`` — the consumer side of a normalization whose γ was folded into w (w = W·γ):
  1 (RMSNorm): z = rstd[m] · acc;  2 (LayerNorm): z = rstd[m] · acc − (rstd·μ)[m] · u[n],
  with u the column sums of the folded w (the mean enters through them; module ``regrouped`` in ops has the
  algebra: LN(x) Wᵀ + b = rstd·(x (Wγ)ᵀ) − rstd·μ·u + (Wβ + b)).
* ``HAS_BIAS`` — a per-column vector (the linear's bias, or v = Wβ + b).
* ``HEAD_DIM`` — a per-head RMSNorm of the projection's output (QK-norm: q and k of Qwen3-style attention), each
  head being HEAD_DIM consecutive columns (a BLOCK_N tile holds whole heads): z = z·rsqrt(mean_head(z²) + eps)·w[d];
  ``HEAD_CENTER``: a per-head LayerNorm instead (no bias), z = (z − μ_head)·rsqrt(var_head + eps)·w[d] (Cohere's
  QK-norm); ``HEAD_WEIGHT_PER_HEAD``: the weight [H, D], one row per head (global head index n // D);
  with ``ROPE`` then the rotate-half rotary embedding, z·cos + rotate_half(z)·sin, rotate_half(z) =
  (−z[D/2:], z[:D/2]) per head, cos and sin [M, D] rows by token (row m); ``ROPE_INTERLEAVED``: the pairs are
  (z[2i], z[2i+1]) instead, rotate(z)[2i] = −z[2i+1], rotate(z)[2i+1] = z[2i] (GPT-J's and Cohere's form).
  ``ROPE_DIM`` = R < D (halves only): partial rotary (GPT-NeoX's, GLM-4.5's, Qwen3-Next's): the first R columns
  of each head are rotated over their own halves, pairs (j, j + R/2), by tables [M, R]; the other columns pass
  through (z·1 + rotate(z)·0, the constants in registers: no table columns of 1 and 0 read).
  ``HEAD_NORM`` off: the rotary embedding alone (a Llama-style q/k projection, no QK-norm). ``HEAD_GATES``: the
  odd heads (global head index n // D) are the even heads' output gates, written as they are (Qwen3-Next's and
  Qwen3.5's q projection, [q_h, gate_h] per head): rstd 1, weight 1, cos 1, sin 0 there.
* ``HAS_RESIDUAL`` — a residual tile [M, N] added (the residual stream's producer); with ``RESIDUAL_NORM`` the
  tile is itself a stream read as its normalized value, r̂ = (r·rstd_r[m] − (rstd_r·μ_r)[m])·γ_r[n] + β_r[n]
  (a post-norm block's next residual add: the normalized tensor is never written).
* ``POST_NORM`` — the post-norm: the norm of z over whole rows (N ≤ BLOCK_N, one tile holds a row),
  1: y = z·rstd·γ + β, rstd = rsqrt(mean(z²) + eps); 2: y = (z − μ)·rstd·γ + β, rstd = rsqrt(var(z) + eps), from
  the fp32 z; μ (LayerNorm) and rstd stored per row [M] fp32 for the backward. With ``RESIDUAL_AFTER`` a second
  residual tile is added after the norm (r + norm(z), sandwich-norm models). z is the norm's input: ``WRITE_AUX``
  stores it (the residual stream the next block reads).
* ``WRITE_AUX`` — z itself stored to ``aux`` (the pre-activation value that the backward reads); with
  ``HEAD_DIM``, z before the per-head norm (the norm's input, which its backward reads).
* ``STATS`` — the producer side: per row and per BLOCK_N segment of columns, the partial statistics of z as
  stored (rounded to the output dtype, what every reader sees): 1: Σz² (RMSNorm), 2: Σz and Σ(z − z̄_seg)²
  (LayerNorm; the segment-centred square does not cancel when |μ| ≫ σ, and segments combine exactly by Chan's
  formula in ``finish_stats``). Written to ``part`` [STATS, cdiv(N, BLOCK_N), M] fp32: a tile-local reduction,
  no traffic between CTAs.
* ``ACTIVATION`` — none, relu, gelu (erf), gelu_tanh, silu, relu² on z; or a gated one (``GATED``): w holds the
  gate and up rows interleaved (row 2j gate j, 2j+1 up j) and out[:, j] = act(z[:, 2j]) · z[:, 2j+1], N/2 wide.
* ``NORM_BACKWARD`` — the regrouped backward of a pre-norm RMSNorm whose consumer is this GEMM's B operand
  (docs/design_notes/regrouped_backward.md, variant C): a = dz, w = the consumer's unfolded weight, so
  acc = dn = dz·W, the gradient reaching the normalized tensor n = x̂·γ, x̂ = x·rstd. With the saved stream x
  (a tile load beside the residual's), rstd (``scale``) and the row mean c̄ = Σ_n(g·x̂)/N given (``shift``; it
  equals Σ_j dz_j·(z_j − b_j)/N over the consumer's own pre-activation z, a row sum the dz producer can fuse):
  g = dn·γ,  dx = rstd·(g − x̂·c̄),  then + residual (the stream's own gradient dR) stored once; and per row
  block the column partials Σ_m dn·x̂ of dγ to ``colpart`` [cdiv(M, BLOCK_M), N] (fp32, one writer per element,
  summed in a fixed order by the host: deterministic). Elementwise, so it runs on the normal tiles at any width.
  (Variant B, c̄ from whole rows in one tile, ran slower and was removed; git history has it.)

The mainloop is Triton's persistent tensor-descriptor matmul: a grid of at most NUM_SMS programs walking output
tiles in grouped (GROUP_M) order, so consecutive tiles share A and B in L2.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import torch
import triton
import triton.language as tl

from .common import aligned16, ensure_allocator, fastest_config, interpret_mode, launcher, m_bucket, traced
from .common import unused_pointer
from .common import num_sms as _num_sms  # a module name tests can stand in for (no GPU to ask)
from .common import tile_coords
from . import tuning
from .launch import cached_launch as _cached_launch  # a module name tests can stand in for

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu", "relu2")
GATED = ("silu_mul", "gelu_mul", "gelu_tanh_mul")  # act(gate) · up
STATS = {"none": 0, "rms": 1, "ln": 2}
NORM_BACKWARDS = ("none", "rms")  # the kernel's NORM_BACKWARD is the index


@triton.jit
def _row_norm(acc, scale_ptr, shift_ptr, u_ptr, offs_m, offs_n, M, N, CENTER: tl.constexpr):
    """rstd[m]·acc (RMSNorm), or rstd[m]·acc − (rstd·μ)[m]·u[n] (LayerNorm, u = column sums of W·γ)."""
    scale = tl.load(scale_ptr + offs_m, mask=offs_m < M, other=0.0)
    acc = acc * scale[:, None]
    if CENTER:
        shift = tl.load(shift_ptr + offs_m, mask=offs_m < M, other=0.0)
        u = tl.load(u_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc = acc - shift[:, None] * u[None, :]
    return acc


@triton.jit
def _add_columns(acc, vec_ptr, offs_n, N):
    v = tl.load(vec_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    return acc + v[None, :]


@triton.jit
def _neighbours(z, BLOCK_M: tl.constexpr, G: tl.constexpr, D: tl.constexpr):
    """Each head's even and odd columns (interleaved RoPE's pairs): [BLOCK_M, G, D] → two [BLOCK_M, G, D/2]."""
    return tl.split(tl.reshape(z, (BLOCK_M, G, D // 2, 2)))


@triton.jit
def _group_halves(z, BLOCK_M: tl.constexpr, G: tl.constexpr, D: tl.constexpr, R: tl.constexpr):
    """The halves of each group of R columns of a head: [BLOCK_M, G, D] → two [BLOCK_M, G, D/R, R/2]."""
    return tl.split(tl.permute(tl.reshape(z, (BLOCK_M, G, D // R, 2, R // 2)), (0, 1, 2, 4, 3)))


@triton.jit
def _head_norm(z, weight_ptr, cos_ptr, sin_ptr, eps, offs_m, off_n, M, HEAD_NORM: tl.constexpr,
               CENTER: tl.constexpr, WEIGHT_PER_HEAD: tl.constexpr, ROPE: tl.constexpr, INTERLEAVED: tl.constexpr,
               GATES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
               R: tl.constexpr):
    """Per head of D columns: z·rsqrt(mean(z²) + eps)·w[d] (HEAD_NORM; CENTER: of z − mean(z), LayerNorm;
    WEIGHT_PER_HEAD: w[head, d]); with ROPE then
    z·cos + rotate(z)·sin, the pairs halves (of the first R columns where R < D, tables [M, R]) or (INTERLEAVED)
    neighbours. GATES: the odd heads (each even head's output gate) pass through: mean 0, rstd 1, weight 1, cos 1,
    sin 0 there."""
    G: tl.constexpr = BLOCK_N // D
    z = tl.reshape(z, (BLOCK_M, G, D))
    d = tl.arange(0, D)
    if GATES:
        normed = ((off_n // D + tl.arange(0, G)) % 2 == 0)[None, :]  # [1, G]: a q head, not a gate
    if HEAD_NORM:
        if CENTER:
            mean = tl.sum(z, axis=2) / D
            if GATES:
                mean = tl.where(normed, mean, 0.0)
            z = z - mean[:, :, None]
        rstd = tl.rsqrt(tl.sum(z * z, axis=2) / D + eps)
        if WEIGHT_PER_HEAD:  # [H, D]: this tile's heads' rows (GATES: of the q heads alone)
            heads = (off_n // D + tl.arange(0, G)) // (1 + GATES)
            w = tl.load(weight_ptr + heads[:, None] * D + d[None, :]).to(tl.float32)[None, :, :]
        else:
            w = tl.load(weight_ptr + d).to(tl.float32)[None, None, :]
        if GATES:
            rstd = tl.where(normed, rstd, 1.0)
            w = tl.where(normed[:, :, None], w, 1.0)
        z = z * rstd[:, :, None] * w
    if ROPE and not INTERLEAVED:  # over halves: the first R columns of each head (R = D: all), tables [M, R]
        # read as their two halves, each in the layout of the head's halves it multiplies (a whole table read and
        # split held both in registers: 128x256 tiles of heads of 256 spilled)
        rows = offs_m[:, None] * R + tl.arange(0, R // 2)[None, :]
        inside = (offs_m < M)[:, None]
        x1, x2 = _group_halves(z, BLOCK_M, G, D, R)  # [BLOCK_M, G, D/R, R/2]
        cos1 = tl.reshape(tl.load(cos_ptr + rows, mask=inside, other=0.0).to(tl.float32), (BLOCK_M, 1, 1, R // 2))
        sin1 = tl.reshape(tl.load(sin_ptr + rows, mask=inside, other=0.0).to(tl.float32), (BLOCK_M, 1, 1, R // 2))
        if R < D or GATES:  # the columns past R and the gates pass through: z·1 + rotate(z)·0
            rotated = (tl.arange(0, D // R) == 0)[None, None, :, None]
            if GATES:
                rotated = rotated & normed[:, :, None, None]
            cos1, sin1 = tl.where(rotated, cos1, 1.0), tl.where(rotated, sin1, 0.0)
        first = x1 * cos1 - x2 * sin1
        cos2 = tl.reshape(tl.load(cos_ptr + rows + R // 2, mask=inside, other=0.0).to(tl.float32),
                          (BLOCK_M, 1, 1, R // 2))
        sin2 = tl.reshape(tl.load(sin_ptr + rows + R // 2, mask=inside, other=0.0).to(tl.float32),
                          (BLOCK_M, 1, 1, R // 2))
        if R < D or GATES:
            cos2, sin2 = tl.where(rotated, cos2, 1.0), tl.where(rotated, sin2, 0.0)
        z = tl.permute(tl.join(first, x2 * cos2 + x1 * sin2), (0, 1, 2, 4, 3))
    elif ROPE:  # neighbouring pairs, tables [M, D] (a partial rotary's padded with cos 1, sin 0)
        rows = offs_m[:, None] * D + d[None, :]
        inside = (offs_m < M)[:, None]
        cos = tl.load(cos_ptr + rows, mask=inside, other=0.0).to(tl.float32)
        sin = tl.load(sin_ptr + rows, mask=inside, other=0.0).to(tl.float32)
        TG: tl.constexpr = 1 + (G - 1) * GATES  # the tables' heads: one, or (GATES) each head's own
        if GATES:  # the gates' cos 1 and sin 0
            cos = tl.reshape(tl.where(normed[:, :, None], cos[:, None, :], 1.0), (BLOCK_M, G * D))
            sin = tl.reshape(tl.where(normed[:, :, None], sin[:, None, :], 0.0), (BLOCK_M, G * D))
        cos1, cos2 = _neighbours(cos, BLOCK_M, TG, D)
        sin1, sin2 = _neighbours(sin, BLOCK_M, TG, D)
        x1, x2 = _neighbours(z, BLOCK_M, G, D)
        z = tl.join(x1 * cos1 - x2 * sin1, x2 * cos2 + x1 * sin2)  # [BLOCK_M, G, D/2, 2]
    return tl.reshape(z, (BLOCK_M, BLOCK_N))


@triton.jit
def _normalized_residual(r, scale_ptr, shift_ptr, weight_ptr, bias_ptr, offs_m, offs_n, M, N,
                         CENTER: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """The residual tile normalized on load: (r·rstd[m] − (rstd·μ)[m])·γ[n] + β[n] (RMSNorm: no μ term)."""
    r = r * tl.load(scale_ptr + offs_m, mask=offs_m < M, other=0.0)[:, None]
    if CENTER:
        r = r - tl.load(shift_ptr + offs_m, mask=offs_m < M, other=0.0)[:, None]
    if HAS_WEIGHT:
        r = r * tl.load(weight_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        r = _add_columns(r, bias_ptr, offs_n, N)
    return r


@triton.jit
def _post_norm(z, weight_ptr, bias_ptr, mean_ptr, rstd_ptr, eps, offs_m, offs_n, M, N, CENTER: tl.constexpr,
               HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """The norm of whole rows (the tile holds all N columns; those beyond N are zero from TMA):
    (z − μ)·rstd·γ + β (LayerNorm) or z·rstd·γ + β (RMSNorm); μ and rstd stored per row."""
    valid = (offs_n < N)[None, :]
    if CENTER:
        mean = tl.sum(z, axis=1) / N
        z = tl.where(valid, z - mean[:, None], 0.0)
        tl.store(mean_ptr + offs_m, mean, mask=offs_m < M)
    rstd = tl.rsqrt(tl.sum(z * z, axis=1) / N + eps)
    tl.store(rstd_ptr + offs_m, rstd, mask=offs_m < M)
    z = z * rstd[:, None]
    if HAS_WEIGHT:
        z = z * tl.load(weight_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        z = _add_columns(z, bias_ptr, offs_n, N)
    return z


@triton.jit
def _sigmoid(z):
    return 1.0 / (1.0 + tl.exp(-z))


@triton.jit
def _tanh_approx(x):
    """The GPU's tanh.approx.f32: one MUFU operation (exp and a reciprocal are two), relative error 2^-11 — below
    bf16's rounding, not fp16's. GPU only (the interpreter runs no inline assembly)."""
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _sigmoid_of(z, FAST: tl.constexpr):
    """σ(z); with ``FAST`` (bf16 outputs) ½ + ½·tanh(z/2) on one MUFU operation."""
    if FAST:
        return 0.5 + 0.5 * _tanh_approx(0.5 * z)
    else:
        return _sigmoid(z)


@triton.jit
def _erf(x):
    """erf to 1.5e-7 absolute (Abramowitz & Stegun 7.1.26): a rational term and one exp, a third of libdevice's
    erff in the epilogue, which runs after the mainloop, not under it."""
    ax = tl.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * ax)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = 1.0 - poly * tl.exp(-ax * ax)
    return tl.where(x < 0, -y, y)


@triton.jit
def _erf_16bit(x, FAST: tl.constexpr):
    """erf to 4e-5 absolute, for 16-bit outputs (GELU's error a tenth of fp16's half-ulp, a hundredth of bf16's):
    tanh(x·P(x²)) with P of degree 2 fitted to erf (minimax over [0, 3]), tanh(y) = 1 − 2 / (1 + e^{2y}); ±1 beyond
    |x| = 3 (erf is 1 − 2e-5 there; P would turn past 7.6), so GELU's absolute error stays under 1e-4 and its far
    negative tail is exactly 0. Half the instructions of ``_erf``, which matters because the epilogue is ALU-bound
    at short K (``benchmarks/diagnostics/epilogue_configs.py --pieces``). ``FAST``: the tanh on one MUFU operation
    (``_tanh_approx``; bf16 outputs)."""
    xc = tl.minimum(tl.maximum(x, -3.0), 3.0)
    x2 = xc * xc
    y2 = xc * (2.2562867592876046 + x2 * (0.2081623707901776 - 0.003572948864116719 * x2))  # 2·x·P(x²)
    if FAST:
        t = _tanh_approx(0.5 * y2)
    else:
        t = 1.0 - 2.0 / (1.0 + tl.exp(y2))
    return tl.where(xc == x, t, tl.where(x > 0, 1.0, -1.0))


@triton.jit
def _activation(z, ACTIVATION: tl.constexpr, WIDE: tl.constexpr, FAST: tl.constexpr):
    """0 none, 1 relu, 2 gelu (erf), 3 gelu (tanh), 4 silu, 5 relu²; fp32 in and out. ``WIDE``: the output is fp32
    (GELU's erf then to 1.5e-7, else to 4e-5: below a 16-bit output's rounding at half the cost). ``FAST``: σ and
    tanh on one MUFU operation each (bf16 outputs; ``tuning.epilogue_fast_sigmoid``)."""
    if ACTIVATION == 1:
        z = tl.maximum(z, 0.0)
    elif ACTIVATION == 2:
        if WIDE:
            z = 0.5 * z * (1.0 + _erf(z * 0.7071067811865476))
        else:
            z = 0.5 * z * (1.0 + _erf_16bit(z * 0.7071067811865476, FAST))
    elif ACTIVATION == 3:
        inner = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        z = 0.5 * z * (1.0 + (2.0 * _sigmoid_of(2.0 * inner, FAST) - 1.0))
    elif ACTIVATION == 4:
        z = z * _sigmoid_of(z, FAST)
    elif ACTIVATION == 5:
        z = tl.maximum(z, 0.0)
        z = z * z
    return z


@triton.jit
def _gated(z, ACTIVATION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WIDE: tl.constexpr,
           FAST: tl.constexpr):
    """Columns interleaved as (gate, up) pairs: act(gate) · up, BLOCK_N // 2 wide."""
    gate, up = tl.split(tl.reshape(z, (BLOCK_M, BLOCK_N // 2, 2)))
    return _activation(gate, ACTIVATION, WIDE, FAST) * up


@triton.jit
def _segment_partials(z, part_ptr, offs_m, seg, seg_off, M, N, STATS: tl.constexpr, WIDTH: tl.constexpr):
    """One statistics segment per row, z [BLOCK_M, WIDTH] zero beyond N: Σz² (1), or Σz and Σ(z − segment mean)²
    (2), to part[s, seg, m]."""
    valid = ((seg_off + tl.arange(0, WIDTH)) < N)[None, :]
    ptrs = part_ptr + seg * M + offs_m
    if STATS == 1:
        tl.store(ptrs, tl.sum(z * z, axis=1), mask=offs_m < M)
    else:
        count = tl.maximum(tl.minimum(N - seg_off, WIDTH), 1).to(tl.float32)
        total = tl.sum(z, axis=1)
        d = tl.where(valid, z - (total / count)[:, None], 0.0)
        tl.store(ptrs, total, mask=offs_m < M)
        tl.store(ptrs + tl.cdiv(N, WIDTH) * M, tl.sum(d * d, axis=1), mask=offs_m < M)


@triton.jit
def _row_partials(z, part_ptr, offs_m, off_n, pid_n, M, N, STATS: tl.constexpr, BLOCK_N: tl.constexpr,
                  WIDTH: tl.constexpr, BLOCK_M: tl.constexpr):
    """The tile's BLOCK_N / WIDTH statistics segments of WIDTH columns each (the partials' layout does not
    depend on the tile: a 256-wide tile writes two 128-wide segments); a segment wholly beyond N is not
    written (the partials have cdiv(N, WIDTH) of them)."""
    z = tl.where(((off_n + tl.arange(0, BLOCK_N)) < N)[None, :], z, 0.0)
    if BLOCK_N == WIDTH:
        _segment_partials(z, part_ptr, offs_m, pid_n, off_n, M, N, STATS, WIDTH)
    else:  # two segments (BLOCK_N = 2·WIDTH), split as the gated activation splits its gate/up pairs
        lo, hi = tl.split(tl.permute(tl.reshape(z, [BLOCK_M, 2, WIDTH]), [0, 2, 1]))
        seg = 2 * pid_n
        _segment_partials(lo, part_ptr, offs_m, seg, off_n, M, N, STATS, WIDTH)
        if off_n + WIDTH < N:
            _segment_partials(hi, part_ptr, offs_m, seg + 1, off_n + WIDTH, M, N, STATS, WIDTH)


@triton.jit
def _rms_backward(dn, x, rstd_ptr, gamma_ptr, colpart_ptr, row_mean_ptr, offs_m, offs_n, pid_m, M, N):
    """dx = rstd·(g − x̂·c̄), g = dn·γ, x̂ = x·rstd, c̄ = Σ_n(g·x̂)/N read from row_mean_ptr; stores this row
    block's dγ partials Σ_m dn·x̂. Out-of-range rows and columns of dn and x are zero (TMA), so they add nothing."""
    rstd = tl.load(rstd_ptr + offs_m, mask=offs_m < M, other=0.0)
    x_hat = x * rstd[:, None]
    tl.store(colpart_ptr + pid_m * N + offs_n, tl.sum(dn * x_hat, axis=0), mask=offs_n < N)
    g = dn * tl.load(gamma_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    c = tl.load(row_mean_ptr + offs_m, mask=offs_m < M, other=0.0)
    return (g - x_hat * c[:, None]) * rstd[:, None]


@triton.jit
def epilogue_gemm_kernel(
    a_ptr, w_ptr, out_ptr, aux_ptr, res_ptr, bias_ptr, scale_ptr, shift_ptr, u_ptr, part_ptr,
    res_scale_ptr, res_shift_ptr, res_weight_ptr, res_bias_ptr, x_ptr, gamma_ptr, colpart_ptr,
    head_weight_ptr, cos_ptr, sin_ptr, norm_eps, norm_eps_ptr,
    post_bias_ptr, mean_ptr, rstd_ptr, res_after_ptr,
    M, N, K, stride_am, stride_wn, stride_om, stride_rm, stride_xm,
    ROW_NORM: tl.constexpr,  # 0 none, 1 RMSNorm (row scale), 2 LayerNorm (row scale and mean correction)
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, WRITE_AUX: tl.constexpr,
    HEAD_DIM: tl.constexpr,  # 0 none, else a per-head piece over each HEAD_DIM columns
    HEAD_NORM: tl.constexpr,  # with HEAD_DIM: the per-head RMSNorm (off: the rotary embedding alone)
    HEAD_CENTER: tl.constexpr,  # the per-head norm a LayerNorm (the head's mean subtracted), not an RMSNorm
    HEAD_WEIGHT_PER_HEAD: tl.constexpr,  # the per-head norm's weight [H, D], not [D]
    EPS_FROM_PTR: tl.constexpr,  # the norm's eps (per-head or post-norm) read from norm_eps_ptr, not norm_eps
    ROPE: tl.constexpr,  # the rotary embedding after the per-head norm
    ROPE_INTERLEAVED: tl.constexpr,  # its pairs neighbouring columns, not halves
    ROPE_DIM: tl.constexpr,  # over halves: the width of each rotated group of a head's columns (HEAD_DIM: all)
    HEAD_GATES: tl.constexpr,  # the odd heads are the even ones' output gates: passed through
    RESIDUAL_NORM: tl.constexpr,  # 0 none, 1 RMSNorm, 2 LayerNorm of the residual, applied on load
    HAS_RES_WEIGHT: tl.constexpr, HAS_RES_BIAS: tl.constexpr,
    POST_NORM: tl.constexpr,  # 0 none, 1 RMSNorm, 2 LayerNorm of z over whole rows (N <= BLOCK_N)
    HAS_POST_WEIGHT: tl.constexpr, HAS_POST_BIAS: tl.constexpr,
    RESIDUAL_AFTER: tl.constexpr,  # a residual tile added after the post-norm
    ACTIVATION: tl.constexpr,  # index into ACTIVATIONS (of the gate's activation when GATED)
    GATED: tl.constexpr,
    FAST_SIGMOID: tl.constexpr,  # σ and tanh on one MUFU operation (bf16 outputs on the GPU)
    LOAD_AFTER_MAINLOOP: tl.constexpr,  # the residual (and x) tile read after the k-loop, not held through it
    STATS: tl.constexpr,  # 0 none, 1 Σz², 2 Σz and Σ(z − z̄)², per row and STATS_WIDTH segment
    STATS_WIDTH: tl.constexpr,  # columns per statistics segment (BLOCK_N or BLOCK_N / 2)
    NORM_BACKWARD: tl.constexpr,  # 0 none, 1 RMSNorm's backward on the dgrad (c̄ given)
    W_KN: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
):
    dtype = out_ptr.dtype.element_ty
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    if W_KN:
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[K, N], strides=[stride_wn, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    else:
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    if GATED:
        o_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N // 2], strides=[stride_om, 1],
                                           block_shape=[BLOCK_M, BLOCK_N // 2])
    else:
        o_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[stride_om, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])
    if WRITE_AUX:
        x_desc = tl.make_tensor_descriptor(aux_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    if HAS_RESIDUAL:
        r_desc = tl.make_tensor_descriptor(res_ptr, shape=[M, N], strides=[stride_rm, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])
    if NORM_BACKWARD != 0:
        xin_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[stride_xm, 1],
                                             block_shape=[BLOCK_M, BLOCK_N])

    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n

    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        if not LOAD_AFTER_MAINLOOP:  # issued before the k-loop: the latency hides, the registers stay taken
            if HAS_RESIDUAL:
                residual = r_desc.load([off_m, off_n])
            if NORM_BACKWARD != 0:
                x_tile = xin_desc.load([off_m, off_n])
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = a_desc.load([off_m, off_k])  # out-of-bounds rows and columns read as 0
            if W_KN:
                b = w_desc.load([off_k, off_n])
            else:
                b = w_desc.load([off_n, off_k]).T
            acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        if LOAD_AFTER_MAINLOOP:
            if HAS_RESIDUAL:
                residual = r_desc.load([off_m, off_n])
            if NORM_BACKWARD != 0:
                x_tile = xin_desc.load([off_m, off_n])

        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        if NORM_BACKWARD != 0:
            acc = _rms_backward(acc, x_tile.to(tl.float32), scale_ptr, gamma_ptr, colpart_ptr, shift_ptr, offs_m,
                                offs_n, pid_m, M, N)
        if ROW_NORM != 0:
            acc = _row_norm(acc, scale_ptr, shift_ptr, u_ptr, offs_m, offs_n, M, N, ROW_NORM == 2)
        if HAS_BIAS:
            acc = _add_columns(acc, bias_ptr, offs_n, N)
        if HEAD_DIM != 0:
            if WRITE_AUX:  # the projection's output, which the per-head norm's backward reads (training)
                x_desc.store([off_m, off_n], acc.to(dtype))
            eps = tl.load(norm_eps_ptr).to(tl.float32) if EPS_FROM_PTR else tl.cast(norm_eps, tl.float32)
            acc = _head_norm(acc, head_weight_ptr, cos_ptr, sin_ptr, eps, offs_m, off_n, M, HEAD_NORM, HEAD_CENTER,
                             HEAD_WEIGHT_PER_HEAD, ROPE,
                             ROPE_INTERLEAVED, HEAD_GATES, BLOCK_M, BLOCK_N, HEAD_DIM, ROPE_DIM)
        if HAS_RESIDUAL:
            r = residual.to(tl.float32)
            if RESIDUAL_NORM != 0:
                r = _normalized_residual(r, res_scale_ptr, res_shift_ptr, res_weight_ptr, res_bias_ptr, offs_m,
                                         offs_n, M, N, RESIDUAL_NORM == 2, HAS_RES_WEIGHT, HAS_RES_BIAS)
            acc = acc + r
        if (WRITE_AUX and HEAD_DIM == 0) or STATS != 0:
            z_stored = acc.to(dtype)
            if WRITE_AUX and HEAD_DIM == 0:
                x_desc.store([off_m, off_n], z_stored)
            if STATS != 0:
                _row_partials(z_stored.to(tl.float32), part_ptr, offs_m, off_n, pid_n, M, N, STATS, BLOCK_N,
                              STATS_WIDTH, BLOCK_M)
        if POST_NORM != 0:
            eps = tl.load(norm_eps_ptr).to(tl.float32) if EPS_FROM_PTR else tl.cast(norm_eps, tl.float32)
            acc = _post_norm(acc, gamma_ptr, post_bias_ptr, mean_ptr, rstd_ptr, eps, offs_m, offs_n, M, N,
                             POST_NORM == 2, HAS_POST_WEIGHT, HAS_POST_BIAS)
            if RESIDUAL_AFTER:
                after = tl.load(res_after_ptr + offs_m[:, None] * N + offs_n[None, :],
                                mask=(offs_m < M)[:, None] & (offs_n < N)[None, :], other=0.0)
                acc = acc + after.to(tl.float32)
        if GATED:
            gated = _gated(acc, ACTIVATION, BLOCK_M, BLOCK_N, dtype == tl.float32, FAST_SIGMOID)
            o_desc.store([off_m, off_n // 2], gated.to(dtype))
        else:
            o_desc.store([off_m, off_n], _activation(acc, ACTIVATION, dtype == tl.float32, FAST_SIGMOID).to(dtype))


# --- host side ------------------------------------------------------------------------------------------------

MAX_HEAD_DIM = 256  # the widest BLOCK_N: a tile holds whole heads
MAX_POST_NORM_N = 256  # the post-norm's whole rows in one tile: the widest BLOCK_N (TMA's largest box)


def post_norm_problem(M: int, N: int) -> Optional[str]:
    """Why the post-norm piece cannot take rows of this shape, or None."""
    if N > MAX_POST_NORM_N:
        return (f"N={N} > {MAX_POST_NORM_N}: the post-norm epilogue needs whole rows in one tile (the regrouped "
                f"rewrite, fusion 'regrouped_norm', takes wider rows)")
    if M * N >= 2 ** 31:
        return f"M*N = {M * N} overflows the post-norm epilogue's 32-bit offsets"
    return None


def head_dim_problem(head_dim: int) -> Optional[str]:
    """Why the per-head norm piece cannot take heads of this width, or None."""
    if head_dim < 2 or head_dim & (head_dim - 1):
        return f"head_dim {head_dim} is not a power of two (whole heads in one tile)"
    if head_dim > MAX_HEAD_DIM:
        return f"head_dim {head_dim} is over {MAX_HEAD_DIM} (whole heads in one tile)"
    return None


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """Which epilogue pieces run (the module doc); the tensors are passed to ``run`` separately."""

    row_norm: str = "none"  # "none" | "rms" | "ln"
    bias: bool = False
    residual: bool = False
    residual_norm: str = "none"  # "none" | "rms" | "ln": the residual read as its normalized value
    activation: str = "none"  # ACTIVATIONS or GATED
    write_aux: bool = False
    stats: str = "none"  # "none" | "rms" | "ln"
    norm_backward: str = "none"  # "none" | "rms": the pre-norm's backward on its consumer's dgrad
    head_dim: int = 0  # a per-head RMSNorm over each head_dim columns (QK-norm); 0: none
    rope: bool = False  # the rotary embedding after the per-head norm
    rope_interleaved: bool = False  # with rope: pairs of neighbouring columns (GPT-J's form), not halves
    # with rope over halves: the first rope_dim columns of each head rotated over their own halves, the tables
    # [M, rope_dim] (partial rotary); 0: the head's halves
    rope_dim: int = 0
    head_norm: bool = True  # with head_dim: False leaves the norm out (the rotary embedding alone)
    head_center: bool = False  # with head_norm: a per-head LayerNorm (the head's mean subtracted; no bias)
    # with head_dim: the heads alternate with their output gates (Qwen3-Next's q projection), passed through
    head_gates: bool = False
    post_norm: str = "none"  # "none" | "rms" | "ln": the norm of z over whole rows (N <= MAX_POST_NORM_N)
    residual_after: bool = False  # with post_norm: a residual added after the norm

    def __post_init__(self):
        if self.row_norm not in STATS:
            raise ValueError(f"epilogue row_norm must be one of {tuple(STATS)}, got {self.row_norm!r}")
        if self.residual_norm not in STATS:
            raise ValueError(f"epilogue residual_norm must be one of {tuple(STATS)}, got {self.residual_norm!r}")
        if self.residual_norm != "none" and not self.residual:
            raise ValueError("residual_norm needs a residual")
        if self.stats not in STATS:
            raise ValueError(f"epilogue stats must be one of {tuple(STATS)}, got {self.stats!r}")
        if self.activation not in ACTIVATIONS + GATED:
            raise ValueError(f"epilogue activation must be one of {ACTIVATIONS + GATED}, got {self.activation!r}")
        if self.gated and (self.residual or self.stats != "none"):
            raise ValueError("a gated activation halves the output: no residual or statistics with it")
        if self.norm_backward not in NORM_BACKWARDS:
            raise ValueError(f"epilogue norm_backward must be one of {NORM_BACKWARDS}, got {self.norm_backward!r}")
        if self.norm_backward != "none" and (self.row_norm != "none" or self.bias or self.residual_norm != "none"
                                             or self.activation != "none" or self.write_aux
                                             or self.stats != "none" or self.head_dim):
            raise ValueError("the norm's backward takes a plain residual (dR) only: no other epilogue piece")
        if self.head_dim and head_dim_problem(self.head_dim):
            raise ValueError(f"epilogue head_dim: {head_dim_problem(self.head_dim)}")
        if self.rope and not self.head_dim:
            raise ValueError("the rotary embedding follows the per-head norm: rope needs head_dim")
        if self.rope_interleaved and not self.rope:
            raise ValueError("rope_interleaved is a form of the rotary embedding: it needs rope")
        if self.rope_dim and not (self.rope and not self.rope_interleaved and 2 <= self.rope_dim < self.head_dim
                                  and not self.rope_dim & (self.rope_dim - 1)):
            raise ValueError(f"rope_dim {self.rope_dim}: groups of rotated columns over halves need rope, not "
                             f"interleaved, and a power of two under head_dim {self.head_dim}")
        if self.head_gates and not self.head_dim:
            raise ValueError("head_gates are passed-through heads between normalized ones: they need head_dim")
        if not self.head_norm and not (self.head_dim and self.rope):
            raise ValueError("head_norm=False is the rotary embedding alone: it needs head_dim and rope")
        if self.head_center and not (self.head_dim and self.head_norm):
            raise ValueError("head_center makes the per-head norm a LayerNorm: it needs head_dim and head_norm")
        if self.head_dim and (self.residual or self.stats != "none" or self.activation != "none"):
            raise ValueError("a per-head norm (QK-norm) takes no residual, statistics or activation after it")
        if self.post_norm not in STATS:
            raise ValueError(f"epilogue post_norm must be one of {tuple(STATS)}, got {self.post_norm!r}")
        if self.post_norm != "none" and (self.row_norm != "none" or self.stats != "none" or self.head_dim
                                         or self.activation != "none" or self.norm_backward != "none"):
            raise ValueError("the post-norm takes bias and residuals only: no row norm, statistics, per-head norm "
                             "or activation with it")
        if self.residual_after and self.post_norm == "none":
            raise ValueError("residual_after is added after the post-norm: it needs post_norm")

    @property
    def gated(self) -> bool:
        return self.activation in GATED

    @property
    def activation_index(self) -> int:
        name = self.activation[:-len("_mul")] if self.gated else self.activation
        return ACTIVATIONS.index(name)


# BLOCK_M = 128 is one wgmma warpgroup tile per 4 warps; K tiles of 64 (128-byte rows for 16-bit types, what TMA
# swizzles best); BLOCK_N 128 or 256 trades L2 reuse against registers.
# Warp specialization (tl.range(..., warp_specialize=True)), which would overlap a tile's epilogue with the next
# tile's mainloop, is not usable in Triton 3.6 on sm_90: a gated epilogue does not compile ("unsupported op type"
# at tt.reshape/tt.split), and the others compile (partitioned at 4 warps only) but compute wrong results as soon as
# the epilogue has a piece — rms, LayerNorm + GELU, residual + statistics all differ from the unspecialized kernel
# by 0.7–0.9 of max|out| or NaN; the plain GEMM is right
# (benchmarks/diagnostics/epilogue_configs.py, benchmarks/results/gpu-2026-12-03c/call_b). No config asks for it.
# CTAS_PER_SM = 2: a grid of two programs per SM with tiles small enough that two fit (shared memory and
# registers), so one program's epilogue runs while the other's mainloop does: the overlap warp specialization
# would give, by occupancy.
GPU_CONFIGS = [
    dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_stages=s, num_warps=w, FLATTEN=fl, WARP_SPECIALIZE=False,
         CTAS_PER_SM=c)
    for (bm, bn, bk, s, w, fl, c) in [
        (128, 256, 64, 3, 8, False, 1),
        (128, 256, 64, 3, 8, True, 1),
        (128, 128, 64, 4, 4, True, 1),
        (128, 128, 64, 4, 8, False, 1),
        (128, 128, 128, 3, 8, False, 1),
        (128, 128, 64, 2, 4, False, 2),
        (64, 128, 64, 3, 4, False, 2),
        (64, 256, 64, 3, 8, False, 2),
    ]
]
# The norm's backward runs on the 128×128, 8-warp tiles: with its x and dR tiles the 128×256 and the 4-warp
# configs spill 0.8–15 KB (ptxas, tests/test_sm90_compile.py). BLOCK_M is fixed because it sizes the dγ
# partials (the fake op's output).
NORM_BACKWARD_BLOCK_M = 128
INTERPRETER_CONFIG = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_stages=1, num_warps=1, FLATTEN=False,
                          WARP_SPECIALIZE=False, CTAS_PER_SM=1)


def stats_width(device: torch.device) -> int:
    """Columns per partial-statistics segment: a statistics epilogue's tiles are one or two segments wide."""
    return 128 if device.type == "cuda" else INTERPRETER_CONFIG["BLOCK_N"]


def num_segments(N: int, device: torch.device) -> int:
    return triton.cdiv(N, stats_width(device))


def unsupported_reason(a: torch.Tensor, w: torch.Tensor, w_kn: bool, epilogue: Epilogue) -> str | None:
    """None if the kernel takes these operands, else the reason, naming the cause."""
    if a.dim() != 2 or w.dim() != 2:
        return "the kernel takes 2-D operands"
    if a.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {a.dtype} is not supported"
    if w.dtype != a.dtype:
        return f"weight dtype {w.dtype} differs from the input's {a.dtype}"
    if a.device.type != "cuda" and not interpret_mode():
        return f"no Triton kernel for device {a.device.type}"
    if a.dtype == torch.bfloat16 and interpret_mode():
        return "the Triton 3.6 interpreter's bf16 tl.dot is wrong (fp16 and fp32 are right)"
    if a.device.type == "cuda" and torch.cuda.get_device_capability(a.device)[0] < 9:
        return "tensor descriptors (TMA) need sm_90 or newer"
    N = w.shape[1 if w_kn else 0]
    elem = a.element_size()
    for name, t in (("input", a), ("weight", w)):
        if t.stride(-1) != 1:
            return f"{name} is not contiguous in its last dim (strides {tuple(t.stride())})"
        if (t.stride(0) * elem) % 16 or not aligned16(t):
            return f"{name} rows are not 16-byte aligned (TMA; stride {t.stride(0)}, offset {t.storage_offset()})"
    if (N * elem) % 16:
        return f"N={N}: output rows are not 16-byte aligned (TMA)"
    if epilogue.gated and (N // 2 * elem) % 16:
        return f"N={N}: the gated output's N/2 = {N // 2} columns are not 16-byte aligned (TMA)"
    if epilogue.gated and N % 2:
        return f"a gated activation needs an even N (gate/up pairs), got {N}"
    if epilogue.head_dim and N % epilogue.head_dim:
        return f"a per-head norm needs whole heads: N={N}, head_dim={epilogue.head_dim}"
    if epilogue.head_gates and N % (2 * epilogue.head_dim):
        return (f"a per-head norm with output gates needs whole (head, gate) pairs: N={N}, "
                f"head_dim={epilogue.head_dim}")
    if epilogue.post_norm != "none":
        return post_norm_problem(a.shape[0], N)
    return None


def norm_backward_configs() -> list[dict]:
    return [c for c in GPU_CONFIGS
            if (c["BLOCK_M"], c["BLOCK_N"], c["num_warps"]) == (NORM_BACKWARD_BLOCK_M, 128, 8)]


def norm_backward_block_m(device: torch.device) -> int:
    """Rows per dγ partial of the norm's backward: the BLOCK_M of every config it runs with."""
    return NORM_BACKWARD_BLOCK_M if device.type == "cuda" else INTERPRETER_CONFIG["BLOCK_M"]


def _configs(a: torch.Tensor, epilogue: Epilogue, N: int = 0) -> list[dict]:
    whole_rows = triton.next_power_of_2(N) if epilogue.post_norm != "none" else 0
    if not a.is_cuda:  # whole heads (or rows) in a tile
        return [dict(INTERPRETER_CONFIG, BLOCK_N=max(INTERPRETER_CONFIG["BLOCK_N"], epilogue.head_dim, whole_rows))]
    if epilogue.norm_backward != "none":
        configs = norm_backward_configs()
        return [dict(c, BLOCK_K=32) for c in configs] if a.dtype == torch.float32 else configs
    configs = GPU_CONFIGS
    if a.dtype == torch.float32:  # 4-byte elements: halve K tiles to stay within shared memory
        configs = [dict(c, BLOCK_K=32) for c in configs]
    if epilogue.stats != "none":  # one statistics segment per tile (two: tuning.epilogue_stats_two_segments)
        widths = (1, 2) if tuning.current().epilogue_stats_two_segments else (1,)
        return [c for c in configs if c["BLOCK_N"] in [k * stats_width(a.device) for k in widths]]
    if epilogue.head_dim:  # whole heads in a tile
        configs = [c for c in configs if c["BLOCK_N"] % epilogue.head_dim == 0]
        if a.dtype == torch.float32:  # Triton 3.6 on sm_90 computed the per-head norm + RoPE with the aux store
            # wrong (output off by 0.6-1.0 relative) on 128-row tiles of 4 warps at two CTAs per SM, fp32 only
            return [c for c in configs if not (c["BLOCK_M"] == 128 and c.get("CTAS_PER_SM", 1) == 2)]
    if whole_rows:  # the GEMM configs with BLOCK_N the rows' width (at least 64), each once; at most 128 fp32
        # accumulator registers per thread (4-warp 128x256 tiles spilled 4-6 KB in ptxas, tests/test_sm90_compile.py)
        shaped = [dict(c, BLOCK_N=max(64, whole_rows)) for c in configs]
        shaped = [c for c in shaped if c["BLOCK_M"] * c["BLOCK_N"] <= 128 * 32 * c["num_warps"]
                  and _shared_bytes(c, a.element_size(), epilogue) <= _max_shared(a.device)]
        if not shaped:  # fp32 rows of 256 with a residual or the z store: 64-row tiles, two stages
            shaped = [dict(configs[0], BLOCK_M=64, BLOCK_N=max(64, whole_rows), num_stages=2, num_warps=8,
                           FLATTEN=False, CTAS_PER_SM=1)]
        return [c for i, c in enumerate(shaped) if c not in shaped[:i]]
    return configs


def _shared_bytes(cfg: dict, elem: int, epilogue: Epilogue) -> int:
    """Shared memory a widened (whole-row) config needs: the mainloop's A and B stages, then the output tile and
    (with a residual read or the aux store) one more. Within a few bytes of what Triton 3.6 asked for on sm_90
    where it did not fit (128×256×64, 16-bit: 4 stages 262160; 3 stages with a residual 278568)."""
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    tiles = 1 + (epilogue.residual or epilogue.write_aux)
    return (cfg["num_stages"] * (bm + bn) * cfg["BLOCK_K"] + tiles * bm * bn) * elem


@functools.lru_cache(maxsize=None)
def _max_shared(device: torch.device) -> int:
    """Shared memory per block (opt-in) of the device; sm_90's 232448 bytes where there is no GPU to ask (the
    offline sm_90 compile test)."""
    if not torch.cuda.is_available():
        return 232448
    return getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", 232448)


@dataclasses.dataclass(frozen=True)
class ResidualNorm:
    """The statistics and affine parameters of a residual normalized on load: rstd [M], rstd·μ [M] (LayerNorm),
    γ [N], β [N] (each optional but rstd)."""

    scale: torch.Tensor
    shift: torch.Tensor | None = None
    weight: torch.Tensor | None = None
    bias: torch.Tensor | None = None


@dataclasses.dataclass(frozen=True)
class HeadNorm:
    """A per-head norm's weight [D] or [H, D] (None: no norm, the rotary embedding alone) and eps (a number, or a
    one-element fp32 tensor on the kernel's device: a graph input under dynamic shapes), and the rotary tables
    cos, sin [M, D] (rows by token; [M, rope_dim] with the epilogue's rope_dim) or None."""

    weight: torch.Tensor | None
    eps: float | torch.Tensor
    cos: torch.Tensor | None = None
    sin: torch.Tensor | None = None


@dataclasses.dataclass(frozen=True)
class PostNorm:
    """The post-norm's γ and β [N] (each optional), eps (a number, or a one-element fp32 tensor on the kernel's
    device), its outputs rstd and (LayerNorm) mean [M] fp32, and the residual added after it [M, N] (contiguous)
    or None."""

    weight: torch.Tensor | None
    bias: torch.Tensor | None
    eps: float | torch.Tensor
    rstd: torch.Tensor
    mean: torch.Tensor | None = None
    residual_after: torch.Tensor | None = None


def launch(cfg: dict, a, w, out, *, epilogue: Epilogue, w_kn=False, aux=None, residual=None, bias=None,
           scale=None, shift=None, u=None, partials=None, residual_norm: ResidualNorm | None = None,
           x=None, gamma=None, colpart=None, head_norm: HeadNorm | None = None, post_norm: PostNorm | None = None,
           compile_only: bool = False) -> None:
    """One launch with block config ``cfg``; every tensor the epilogue reads or writes given, the rest None.
    ``compile_only``: compile the kernel for these arguments (Triton's ``warmup``) without launching it."""
    M, K = a.shape
    N = w.shape[1 if w_kn else 0]
    if a.is_cuda:
        num_sms = _num_sms(a.device.index or 0)
        ensure_allocator()
    else:
        num_sms = 4
    cfg = dict(cfg)
    programs = num_sms * cfg.pop("CTAS_PER_SM", 1)  # the persistent grid's size and stride
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    dot_precision = "ieee"
    if a.dtype == torch.float32 and a.is_cuda and torch.backends.cuda.matmul.allow_tf32:
        dot_precision = "tf32"
    device = torch.device("cuda") if a.is_cuda else a.device  # the kind of device the kernel compiles for
    dummy = unused_pointer(a)  # never touched: the flags that would read it are off
    kernel = launcher(epilogue_gemm_kernel, a)
    if post_norm is not None:
        gamma = post_norm.weight
    eps = head_norm.eps if head_norm is not None else post_norm.eps if post_norm is not None else 0.0
    # a symbolic M (a direct launch traced under dynamic shapes) takes the whole persistent grid: min() would
    # guard on M, and programs without a tile exit at once
    grid = (programs,) if isinstance(M, torch.SymInt) else (min(programs, tiles),)
    args = (
        a, w, out, *(t if t is not None else dummy for t in (aux, residual, bias, scale, shift, u, partials)),
        *(t if t is not None else dummy for t in (
            (residual_norm.scale, residual_norm.shift, residual_norm.weight, residual_norm.bias)
            if residual_norm is not None else (None,) * 4)),
        *(t if t is not None else dummy for t in (x, gamma, colpart)),
        *(t if t is not None else dummy for t in (
            (head_norm.weight, head_norm.cos, head_norm.sin) if head_norm is not None else (None,) * 3)),
        eps if not isinstance(eps, torch.Tensor) else 0.0, eps if isinstance(eps, torch.Tensor) else dummy,
        *(t if t is not None else dummy for t in (
            (post_norm.bias, post_norm.mean, post_norm.rstd, post_norm.residual_after) if post_norm is not None
            else (None,) * 4)),
        M, N, K, a.stride(0), w.stride(0), out.stride(0), residual.stride(0) if residual is not None else 0,
        x.stride(0) if x is not None else 0)
    meta = dict(
        ROW_NORM=STATS[epilogue.row_norm], HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None,
        WRITE_AUX=aux is not None, HEAD_DIM=epilogue.head_dim, HEAD_NORM=epilogue.head_norm,
        HEAD_CENTER=epilogue.head_center,
        HEAD_WEIGHT_PER_HEAD=head_norm is not None and head_norm.weight is not None and head_norm.weight.dim() == 2,
        ROPE=epilogue.rope,
        ROPE_INTERLEAVED=epilogue.rope_interleaved, ROPE_DIM=epilogue.rope_dim or epilogue.head_dim,
        HEAD_GATES=epilogue.head_gates,
        EPS_FROM_PTR=isinstance(eps, torch.Tensor),
        RESIDUAL_NORM=STATS[epilogue.residual_norm],
        HAS_RES_WEIGHT=residual_norm is not None and residual_norm.weight is not None,
        HAS_RES_BIAS=residual_norm is not None and residual_norm.bias is not None,
        POST_NORM=STATS[epilogue.post_norm], HAS_POST_WEIGHT=gamma is not None and post_norm is not None,
        HAS_POST_BIAS=post_norm is not None and post_norm.bias is not None,
        RESIDUAL_AFTER=post_norm is not None and post_norm.residual_after is not None,
        ACTIVATION=epilogue.activation_index, GATED=epilogue.gated,
        FAST_SIGMOID=fast_sigmoid(out.dtype, device),
        LOAD_AFTER_MAINLOOP=tuning.current().epilogue_load_after_mainloop,
        STATS=STATS[epilogue.stats], STATS_WIDTH=stats_width(device),
        NORM_BACKWARD=NORM_BACKWARDS.index(epilogue.norm_backward), W_KN=w_kn,
        DOT_PRECISION=dot_precision,
        NUM_SMS=programs, **cfg,
    )
    if compile_only:
        kernel.warmup(*args, grid=grid, **meta)
    elif a.is_cuda and not traced(a):  # the JIT binds and specializes ~40 arguments once per launch key, not per call
        _cached_launch(kernel, lambda: grid, args, meta, a.device, key_extra=grid)
    else:
        kernel[grid](*args, **meta)


def fast_sigmoid(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the activations take σ and tanh on one MUFU operation: bf16 outputs on the GPU, where the kernel
    tuning asks for it (``tuning.epilogue_fast_sigmoid``)."""
    return dtype == torch.bfloat16 and device.type == "cuda" and tuning.current().epilogue_fast_sigmoid


_TUNED: dict = {}

# The config that runs a GEMM untuned where its grid is large enough (``default_config``): at every site of the
# calibration grid, the recsys towers and the transformers blocks' smaller grids (bf16, M 4k–256k, K and N
# 256–4096, down to 256 tiles) it ran within a few per cent of the fastest config the tuner offers (the fastest at
# every grid of under three waves), while tuning compiles every config (about 1 s of Triton JIT each), which was
# most of the plugin's first compile (docs/decisions.md#epilogue_gemmdefault_tile).
DEFAULT_TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=3, num_warps=8, CTAS_PER_SM=1)
# a grid with fewer tiles than this many per SM is tuned: the smallest grid measured had 256 tiles (1.94 waves
# of the H200's 132 SMs); under it (partial waves, small M) the tile size may matter
DEFAULT_TILE_MIN_WAVES = 1.9


def default_config(a: torch.Tensor, epilogue: Epilogue, N: int) -> dict | None:
    """The config this GEMM runs without tuning (``DEFAULT_TILE``), or None where it is tuned: a grid under
    ``DEFAULT_TILE_MIN_WAVES`` waves, or an epilogue the grid did not measure — fp32, a post-norm's whole rows,
    the norm's backward or a residual normalized on load. The tile runs the flattened loop except where it
    writes statistics or applies RoPE: with RoPE the plain loop was as fast or faster at the per-head sites
    measured, heads of 128 and 256 (and the flattened one needs more shared memory than the H200 has at
    heads of 256, 245784 of 232448 bytes), where the other configs were slower
    (docs/decisions.md#epilogue_gemmdefault_tile)."""
    if not a.is_cuda or a.element_size() != 2 or epilogue.post_norm != "none" or epilogue.norm_backward != "none":
        return None
    if epilogue.residual_norm != "none":
        return None
    tiles = triton.cdiv(a.shape[0], DEFAULT_TILE["BLOCK_M"]) * triton.cdiv(N, DEFAULT_TILE["BLOCK_N"])
    if tiles < DEFAULT_TILE_MIN_WAVES * _num_sms(a.device.index or 0):
        return None
    flatten = epilogue.stats == "none" and not epilogue.rope
    return next((c for c in _configs(a, epilogue, N) if c["FLATTEN"] == flatten
                 and all(c[k] == v for k, v in DEFAULT_TILE.items())), None)


def tuned_config(a, w, w_kn: bool, epilogue: Epilogue, run) -> dict:
    """The fastest block config for this shape bucket and epilogue, timed once per process (``run(cfg)`` launches
    one config), or ``default_config`` untimed where it applies; the interpreter has one config."""
    N = w.shape[1 if w_kn else 0]
    configs = _configs(a, epilogue, N)
    # the kernel tuning record too: its fields change the kernel and which configs are offered
    key = (m_bucket(a.shape[0]), N, a.shape[1], a.dtype, w_kn, epilogue, tuning.current())
    if len(configs) == 1:
        _TUNED[key] = configs[0]
    if key not in _TUNED:
        default = default_config(a, epilogue, N)
        try:
            if default is not None:
                run(default)  # it compiles and fits here (a config that does not is tuned instead)
                _TUNED[key] = default
        except Exception:
            configs = [c for c in configs if c != default]
    if key not in _TUNED:
        _TUNED[key] = fastest_config(configs, run, f"epilogue_gemm {key}",
                                     compile_only=lambda cfg: run(cfg, compile_only=True))
    return _TUNED[key]


def tuned_for(M: int, N: int, K: int, dtype: torch.dtype, w_kn: bool, epilogue: Epilogue) -> dict | None:
    """The block config ``tuned_config`` chose in this process for this GEMM, or None."""
    return _TUNED.get((m_bucket(M), N, K, dtype, w_kn, epilogue, tuning.current()))


def tuned_configs() -> str:
    """The configs the tuner chose in this process, a line each: (M bucket, N, K, dtype, w_kn) epilogue [the kernel
    tuning fields changed from their defaults] -> config."""
    return "\n".join(f"  {key[:5]} {key[5]}{tuning.changed(key[6]) or ''} -> {cfg}" for key, cfg in _TUNED.items())


def epilogue_gemm(a: torch.Tensor, w: torch.Tensor, *, epilogue: Epilogue, w_kn: bool = False,
                  residual=None, bias=None, scale=None, shift=None, u=None, residual_norm: ResidualNorm | None = None,
                  head_norm: HeadNorm | None = None, config: dict | None = None):
    """(out, aux, partials) of the composed GEMM (module doc). a [M, K]; w [N, K] (or [K, N] with ``w_kn``);
    out [M, N] (or [M, N/2] gated) in a's dtype; aux [M, N] when ``epilogue.write_aux``; partials
    [1 or 2, num_segments(N), M] fp32 when ``epilogue.stats``; absent ones are empty tensors."""
    M, K = a.shape
    N = w.shape[1 if w_kn else 0]
    out = torch.empty(M, N // 2 if epilogue.gated else N, device=a.device, dtype=a.dtype)
    aux = torch.empty(M, N, device=a.device, dtype=a.dtype) if epilogue.write_aux else None
    partials = None
    if epilogue.stats != "none":
        partials = torch.empty(STATS[epilogue.stats], num_segments(N, a.device), M, device=a.device,
                               dtype=torch.float32)
    # absent outputs are distinct empty tensors: a custom op's outputs must not alias each other
    aux_out = aux if aux is not None else a.new_empty(0)
    partials_out = partials if partials is not None else a.new_empty(0, dtype=torch.float32)
    if M == 0:
        return out, aux_out, partials_out
    tensors = dict(aux=aux, residual=residual, bias=bias, scale=scale, shift=shift, u=u, partials=partials,
                   residual_norm=residual_norm, head_norm=head_norm)

    def run(cfg, compile_only=False):
        launch(cfg, a, w, out, epilogue=epilogue, w_kn=w_kn, compile_only=compile_only, **tensors)

    run(config or tuned_config(a, w, w_kn, epilogue, run))
    return out, aux_out, partials_out


def post_norm_epilogue(layer_norm: bool, bias: bool, residual: bool, write_z: bool, residual_after: bool) -> Epilogue:
    """The post-norm's epilogue pieces (``post_norm_gemm``)."""
    return Epilogue(bias=bias, residual=residual, write_aux=write_z, post_norm="ln" if layer_norm else "rms",
                    residual_after=residual_after)


def post_norm_gemm(a: torch.Tensor, w: torch.Tensor, bias, residual, norm_weight, norm_bias, eps, *,
                   layer_norm: bool, write_z: bool = False, w_kn: bool = False, residual_after=None,
                   config: dict | None = None):
    """The post-norm (module doc, ``POST_NORM``): y = norm(z) (+ residual_after), z = a wᵀ + bias + residual,
    RMSNorm or (``layer_norm``) LayerNorm over z's rows with γ = ``norm_weight`` and β = ``norm_bias``; N ≤
    MAX_POST_NORM_N. Residuals [M, N] contiguous. Returns (y, z if ``write_z`` else None, mean [M] fp32 (LayerNorm)
    or None, rstd [M] fp32)."""
    M, K = a.shape
    N = w.shape[1 if w_kn else 0]
    epilogue = post_norm_epilogue(layer_norm, bias is not None, residual is not None, write_z,
                                  residual_after is not None)
    out = torch.empty(M, N, device=a.device, dtype=a.dtype)
    z = torch.empty(M, N, device=a.device, dtype=a.dtype) if write_z else None
    rstd = torch.empty(M, device=a.device, dtype=torch.float32)
    mean = torch.empty(M, device=a.device, dtype=torch.float32) if layer_norm else None
    if M == 0:
        return out, z, mean, rstd
    bias, residual, norm_weight, norm_bias, residual_after = (  # the kernel reads them with unit strides
        t.contiguous() if t is not None else None for t in (bias, residual, norm_weight, norm_bias, residual_after))
    post = PostNorm(norm_weight, norm_bias, eps, rstd, mean, residual_after)

    def run(cfg, compile_only=False):
        launch(cfg, a, w, out, epilogue=epilogue, w_kn=w_kn, aux=z, residual=residual, bias=bias, post_norm=post,
               compile_only=compile_only)

    run(config or tuned_config(a, w, w_kn, epilogue, run))
    return out, z, mean, rstd


def norm_backward_gemm(dz: torch.Tensor, w: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, gamma: torch.Tensor,
                       dresidual: torch.Tensor | None, row_mean: torch.Tensor, *, w_kn: bool = True,
                       config: dict | None = None):
    """(dx, dγ partials) of RMSNorm's backward on its consumer's dgrad (module doc, ``NORM_BACKWARD``).
    dz [M, F] (the consumer's output gradient), w its weight [F, N] (``w_kn``, as nn.Linear stores it: the
    dgrad's B) or [N, F], x [M, N] the saved stream, rstd [M] fp32, γ [N]; dresidual [M, N] is added to dx;
    row_mean [M] fp32, c̄ = Σ_n(g·x̂)/N.
    dx [M, N] in x's dtype; dγ partials [cdiv(M, norm_backward_block_m), N] fp32 (dγ = their sum over rows)."""
    M, N = x.shape
    epilogue = Epilogue(residual=dresidual is not None, norm_backward="rms")
    dx = torch.empty(M, N, device=x.device, dtype=x.dtype)
    colpart = torch.empty(triton.cdiv(M, norm_backward_block_m(x.device)), N, device=x.device,
                          dtype=torch.float32)
    if M == 0:
        return dx, colpart
    tensors = dict(residual=dresidual, scale=rstd, shift=row_mean, x=x, gamma=gamma, colpart=colpart)

    def run(cfg, compile_only=False):
        launch(cfg, dz, w, dx, epilogue=epilogue, w_kn=w_kn, compile_only=compile_only, **tensors)

    run(config or tuned_config(dz, w, w_kn, epilogue, run))
    return dx, colpart
