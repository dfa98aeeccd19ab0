"""FlashNormAttention: LayerNorm → attention per head → residual → RMSNorm → residual, forward and backward
(design.md §1.5), in three kernels forward and four backward, none of which writes q̂ or a.

Rows q [T, H·D] of B sequences (jagged: sequence b owns rows offsets[b] .. offsets[b+1]; a dense batch is the
uniform case), keys and values k, v [B, L, H·D] (any L: every kernel walks the keys in BLOCK_N blocks, the
softmax online):

    q̂   = LN(q)·γ + β                        mean/rstd over the whole H·D row, all heads
    a_h = s · act(q̂_h K_hᵀ) V_h              GDPA: act ∈ {gelu, gelu_tanh, silu, relu2}, no normalization
       or softmax(s · q̂_h K_hᵀ) V_h
    x   = a + q̂
    out = x · rrms · w + q,   rrms = rsqrt(mean(x²) + eps)   over the whole H·D row

q̂, a and x are rounded to the input dtype where eager rounds them, so the kernels compute what the eager block
computes; q̂ and a never go to memory.

Five row-parallel or head-parallel kernels, none of which waits for another's programs:

    forward   1. _ln_stats_kernel     per row block (all heads): mean, rstd
              2. _attention_kernel    per (row block, sequence, head): q̂ → a → x stored, Σ_head x², lse
              3. _rms_out_kernel      per row block: rrms from the heads' Σx², out = x·rrms·w + q
    backward  1. _rms_backward_kernel per row block: dx, Δ, dw partials
              2. _dq_hat_kernel       per (row block, sequence, head): dq̂ = dx + Σ dS K
              3. _dkdv_kernel         per (KV block, sequence·head), a loop over the sequence's row blocks;
                                      with every key in one block (KV ≤ 128) it computes dq̂ too, from the
                                      same dS, and 2. does not run
              4. _ln_backward_kernel  per row block: dq from dq̂, in place; dγ, dβ partials

The two norms are row-wide (all heads), the attention per head. One program per (rows, head) keeps each program
short (the first version looped over the heads in one program: 255 registers, spills, latency-bound at 1.4 ms
for the reference forward); the norms' cross-head sums go through [T, H] partials and the row kernels. x is
written once by the forward (the RMSNorm needs all heads of it) and kept for the backward, which therefore
never recomputes the attention of the forward.

Backward, from q, k, v, x and the saved mean, rstd, rrms (and the log-sum-exp for softmax):

    dx   = rrms·(g·w) − x·rrms³·mean(g·w·x)                g = dout (out = y + q also gives dq a g)
    dq̂   = dx + Σ_kv dS K                                  x = a + q̂, S = q̂_h K_hᵀ
    GDPA:    dV = s·act(S)ᵀ dx,  dS = s·(dx Vᵀ)·act'(S)
    softmax: P = exp(s·S − lse),  dV = Pᵀ dx,  dS = s·P·(dx Vᵀ − Δ),  Δ = rowsum(dx·a),  a = x − q̂
    dK   = dSᵀ q̂
    dq   = g + rstd·(dq̂·γ − mean(dq̂·γ) − q̂n·mean(dq̂·γ·q̂n)),   q̂n = (q − μ)·rstd
    dγ = Σ_rows dq̂·q̂n,  dβ = Σ_rows dq̂,  dw = Σ_rows g·x·rrms   (per-program partials, summed on the host:
    deterministic)
"""

from __future__ import annotations

import functools
import inspect
from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import launch, tuning
from .common import ensure_allocator, num_sms

ACTIVATIONS = {"softmax": 0, "gelu": 1, "gelu_tanh": 2, "silu": 3, "relu2": 4}
MAX_ELEMENTS = 2**31  # element offsets are int32 in the kernels


@triton.jit
def _sigmoid(s):
    return 1.0 / (1.0 + tl.exp(-s))


@triton.jit
def _tanh(u):
    return 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)


@triton.jit
def _activation(s, ACT: tl.constexpr):
    if ACT == 1:  # gelu (erf)
        return 0.5 * s * (1.0 + tl.math.erf(s * 0.7071067811865476))
    elif ACT == 2:  # gelu, tanh approximation
        return 0.5 * s * (1.0 + _tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)))
    elif ACT == 3:  # silu
        return s * _sigmoid(s)
    else:  # relu²
        r = tl.maximum(s, 0.0)
        return r * r


@triton.jit
def _activation_grad(s, ACT: tl.constexpr):
    if ACT == 1:
        return 0.5 * (1.0 + tl.math.erf(s * 0.7071067811865476)) + s * 0.3989422804014327 * tl.exp(-0.5 * s * s)
    elif ACT == 2:
        t = _tanh(0.7978845608028654 * (s + 0.044715 * s * s * s))
        return 0.5 * (1.0 + t) + 0.5 * s * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * s * s)
    elif ACT == 3:
        sig = _sigmoid(s)
        return sig * (1.0 + s * (1.0 - sig))
    else:
        return 2.0 * tl.maximum(s, 0.0)


@triton.jit
def _row_block(offsets_ptr, b, first, BLOCK_M: tl.constexpr):
    """Rows ``first`` .. first + BLOCK_M of sequence b: the global index of the first (int32), the local offsets
    (arange) and which of them exist."""
    seq_start = tl.load(offsets_ptr + b)
    seq_len = tl.load(offsets_ptr + b + 1) - seq_start
    local = tl.arange(0, BLOCK_M)
    return seq_start + first, local, first + local < seq_len


@triton.jit
def _rows(ptr, num_rows, stride, BLOCK_ROWS: tl.constexpr, W: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr):
    """What ``_load`` reads a row-major [num_rows, W] matrix through: a tensor descriptor with BLOCK_ROWS × D
    boxes (TMA: no per-element address registers), or the pointer itself."""
    if TMA:
        return tl.make_tensor_descriptor(ptr, shape=[num_rows, W], strides=[stride, 1],
                                         block_shape=[BLOCK_ROWS, D])
    else:
        return ptr


@triton.jit
def _load(src, row0, local, ok, col0, stride, D: tl.constexpr, TMA: tl.constexpr):
    """Rows row0 + local and columns col0 .. col0 + D of a matrix read through ``_rows``; rows that are not ok
    read as zero (through TMA they belong to the next sequence, or lie past the end and come back as zeros)."""
    if TMA:
        tile = src.load([row0.to(tl.int32), col0])  # descriptor offsets are 32-bit (int64 offsets give int64 row0)
        return tl.where(ok[:, None], tile, tl.zeros_like(tile))
    else:
        rows = (row0 + local).to(tl.int64)
        return tl.load(src + rows[:, None] * stride + col0 + tl.arange(0, D)[None, :], mask=ok[:, None], other=0.0)


@triton.jit
def _kv_source(ptr, b, kv_len, num_seqs, stride_b, stride_l, BLOCK_N: tl.constexpr, W: tl.constexpr,
               D: tl.constexpr, TMA: tl.constexpr):
    """(source, row of sequence b's first key in it) for k or v [B, L, W]: through TMA the [B·L, W] matrix (the
    host makes it contiguous), else a pointer to sequence b."""
    if TMA:
        return _rows(ptr, num_seqs * kv_len, stride_l, BLOCK_N, W, D, TMA), b * kv_len
    else:
        return ptr + b.to(tl.int64) * stride_b, 0  # packed k/v: stride_b may exceed the tensor's own extent


@triton.jit
def _store_rows(ptr, row0, local, ok, col0, stride, value, D: tl.constexpr):
    """Masked store of rows row0 + local (a TMA store would write into the next sequence's rows)."""
    rows = (row0 + local).to(tl.int64)
    tl.store(ptr + rows[:, None] * stride + col0 + tl.arange(0, D)[None, :], value, mask=ok[:, None])


@triton.jit
def _normalized_q(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, D: tl.constexpr,
                  HAS_LN_W: tl.constexpr, HAS_LN_B: tl.constexpr, TMA: tl.constexpr):
    """``_affine_layer_norm`` of head h's tile."""
    q = _load(q_src, row0, local, row_ok, h * D, stride_q, D, TMA)
    head_cols = h * D + tl.arange(0, D)
    return _affine_layer_norm(q, mean, rstd, ln_w_ptr, ln_b_ptr, head_cols, head_cols >= 0, HAS_LN_W, HAS_LN_B)


@triton.jit
def _affine_layer_norm(q, mean, rstd, ln_w_ptr, ln_b_ptr, cols, col_ok, HAS_LN_W: tl.constexpr,
                       HAS_LN_B: tl.constexpr):
    """(q̂n = (q − μ)·rstd in fp32, q̂ = q̂n·γ + β rounded to q's dtype) of a loaded tile whose columns are ``cols``
    (γ, β read where ``col_ok``)."""
    q_norm = (q.to(tl.float32) - mean[:, None]) * rstd[:, None]
    q_hat = q_norm
    if HAS_LN_W:
        q_hat = q_hat * tl.load(ln_w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_LN_B:
        q_hat = q_hat + tl.load(ln_b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    return q_norm, q_hat.to(q.dtype)


@triton.jit
def _kv_block(k_src, v_src, kv_row0, n0, col0, stride_kl, stride_vl, kv_len, BLOCK_N: tl.constexpr,
              D: tl.constexpr, TMA: tl.constexpr):
    """Keys and values n0 .. n0 + BLOCK_N of one head (zero past kv_len), and which of them exist."""
    local = tl.arange(0, BLOCK_N)
    kv_ok = n0 + local < kv_len
    k = _load(k_src, kv_row0 + n0, local, kv_ok, col0, stride_kl, D, TMA)
    v = _load(v_src, kv_row0 + n0, local, kv_ok, col0, stride_vl, D, TMA)
    return k, v, kv_ok


@triton.jit
def _attend(q_hat, k_src, v_src, kv_row0, col0, stride_kl, stride_vl, kv_len, scale, ACT: tl.constexpr,
            BLOCK_N: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr, RESIDUAL_IN_ACC: tl.constexpr = False):
    """a = s·act(q̂ Kᵀ) V, or softmax(s·q̂ Kᵀ) V with its log-sum-exp (natural log); fp32 [BLOCK_M, D].
    RESIDUAL_IN_ACC (not softmax): a + q̂ instead, the accumulator started at q̂."""
    if RESIDUAL_IN_ACC:
        acc = q_hat.to(tl.float32)
    else:
        acc = tl.zeros([q_hat.shape[0], D], tl.float32)
    m_i = tl.full([q_hat.shape[0]], float("-inf"), tl.float32)
    l_i = tl.zeros([q_hat.shape[0]], tl.float32)
    for n0 in range(0, kv_len, BLOCK_N):
        k, v, kv_ok = _kv_block(k_src, v_src, kv_row0, n0, col0, stride_kl, stride_vl, kv_len, BLOCK_N, D, TMA)
        s = tl.dot(q_hat, tl.trans(k))
        if ACT == 0:
            s = tl.where(kv_ok[None, :], s * (scale * 1.4426950408889634), float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None]
            m_i = m_new
        else:
            p = _activation(s, ACT) * scale  # masked keys give s = 0 and v = 0: no contribution
        acc = tl.dot(p.to(v.dtype), v, acc)
    lse = m_i
    if ACT == 0:
        acc = acc / l_i[:, None]
        lse = (m_i + tl.log2(l_i)) / 1.4426950408889634
    return acc, lse


@triton.jit
def _head_x(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, k_src, v_src, kv_row0,
            stride_kl, stride_vl, kv_len, scale, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr,
            HAS_LN_B: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr, RESIDUAL_IN_ACC: tl.constexpr):
    """x = a + q̂ of head h, rounded as eager rounds it (a and q̂ to the input dtype, then their sum), and the
    log-sum-exp of its softmax. RESIDUAL_IN_ACC (not softmax): q̂ added in the fp32 accumulator, one rounding
    (closer to float64 than eager); then q̂ is not held in the accumulator's layout through the key loop (ptxas,
    sm_90, D = 128, 64 × 64: 255 → 177 registers; 64 × 32: 168, three programs per SM instead of two)."""
    q_norm_h, q_hat = _normalized_q(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, D,
                             HAS_LN_W, HAS_LN_B, TMA)
    a, lse = _attend(q_hat, k_src, v_src, kv_row0, h * D, stride_kl, stride_vl, kv_len, scale, ACT, BLOCK_N, D,
                     TMA, RESIDUAL_IN_ACC)
    if RESIDUAL_IN_ACC:
        return a.to(q_hat.dtype), lse
    return (a.to(q_hat.dtype).to(tl.float32) + q_hat.to(tl.float32)).to(q_hat.dtype), lse


@triton.jit
def _row_tile(tile, num_rows, W: tl.constexpr, W_POW2: tl.constexpr, BLOCK_R: tl.constexpr):
    """Rows tile·BLOCK_R .. + BLOCK_R of a [T, W] row matrix, whole (W_POW2 ≥ W columns): their int64 indices,
    which rows exist, the columns, and the [BLOCK_R, W_POW2] mask."""
    rows = (tile * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    cols = tl.arange(0, W_POW2)
    ok = rows < num_rows
    return rows, ok, cols, ok[:, None] & (cols[None, :] < W)


@triton.jit
def _load_tile(ptr, rows, stride, cols, mask):
    return tl.load(ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)


@triton.jit
def _load_cols(ptr, cols, W: tl.constexpr):
    return tl.load(ptr + cols, mask=cols < W, other=0.0).to(tl.float32)


@triton.jit
def _head_sums(t, H: tl.constexpr, D: tl.constexpr):
    """[BLOCK_R, W_POW2] → per-head row sums [BLOCK_R, W_POW2 // D] (W_POW2 = next power of two of H·D is a
    multiple of D, the heads past H sum zeros)."""
    return tl.sum(tl.reshape(t, [t.shape[0], t.shape[1] // D, D]), axis=2)


@triton.jit
def _ln_stats_kernel(q_ptr, mean_ptr, rstd_ptr, num_rows, stride_q, eps, W: tl.constexpr, W_POW2: tl.constexpr,
                     BLOCK_R: tl.constexpr):
    """Forward 1: the LayerNorm's mean and rstd over each whole row (all heads), two passes in registers."""
    for tile in range(tl.program_id(0), tl.cdiv(num_rows, BLOCK_R), tl.num_programs(0)):
        rows, ok, cols, mask = _row_tile(tile, num_rows, W, W_POW2, BLOCK_R)
        q = _load_tile(q_ptr, rows, stride_q, cols, mask).to(tl.float32)
        mean = tl.sum(q, axis=1) / W
        c = tl.where(mask, q - mean[:, None], 0.0)
        tl.store(mean_ptr + rows, mean, mask=ok)
        tl.store(rstd_ptr + rows, tl.rsqrt(tl.sum(c * c, axis=1) / W + eps), mask=ok)


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, x_ptr, lse_ptr, offsets_ptr, ln_w_ptr, ln_b_ptr, mean_ptr, rstd_ptr,
                      num_rows, num_seqs, stride_q, stride_x, stride_kb, stride_kl, stride_vb, stride_vl,
                      kv_len, scale,
                      H: tl.constexpr, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr,
                      HAS_LN_B: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr,
                      RESIDUAL_IN_ACC: tl.constexpr = False):
    """Forward 2, per (row block, sequence, head): q̂ from q and the row statistics (the LayerNorm prologue),
    x = a + q̂ stored, and the log-sum-exp ([T, H] fp32)."""
    b = tl.program_id(1)
    h = tl.program_id(2)
    row0, local, row_ok = _row_block(offsets_ptr, b, tl.program_id(0) * BLOCK_M, BLOCK_M)
    if tl.max(row_ok.to(tl.int32), axis=0) == 0:
        return
    rows = (row0 + local).to(tl.int64)
    q_src = _rows(q_ptr, num_rows, stride_q, BLOCK_M, H * D, D, TMA)
    k_src, kv_row0 = _kv_source(k_ptr, b, kv_len, num_seqs, stride_kb, stride_kl, BLOCK_N, H * D, D, TMA)
    v_src, v_row0 = _kv_source(v_ptr, b, kv_len, num_seqs, stride_vb, stride_vl, BLOCK_N, H * D, D, TMA)
    mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
    rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
    x, lse = _head_x(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, k_src, v_src,
                     kv_row0, stride_kl, stride_vl, kv_len, scale, D, ACT, HAS_LN_W, HAS_LN_B, BLOCK_N, TMA,
                     RESIDUAL_IN_ACC)
    _store_rows(x_ptr, row0, local, row_ok, h * D, stride_x, x, D)
    if ACT == 0:
        tl.store(lse_ptr + rows * H + h, lse, mask=row_ok)


@triton.jit
def _rms_out_kernel(x_ptr, q_ptr, out_ptr, rrms_ptr, rms_w_ptr, num_rows, stride_x, stride_q, stride_o, eps,
                    W: tl.constexpr, W_POW2: tl.constexpr, HAS_RMS_W: tl.constexpr, BLOCK_R: tl.constexpr):
    """Forward 3, the RMSNorm epilogue over whole rows: out = x·rrms·w + q (y rounded as eager rounds it)."""
    for tile in range(tl.program_id(0), tl.cdiv(num_rows, BLOCK_R), tl.num_programs(0)):
        rows, ok, cols, mask = _row_tile(tile, num_rows, W, W_POW2, BLOCK_R)
        x = _load_tile(x_ptr, rows, stride_x, cols, mask).to(tl.float32)
        rrms = tl.rsqrt(tl.sum(x * x, axis=1) / W + eps)
        tl.store(rrms_ptr + rows, rrms, mask=ok)
        y = x * rrms[:, None]
        if HAS_RMS_W:
            y = y * _load_cols(rms_w_ptr, cols, W)[None, :]
        q = _load_tile(q_ptr, rows, stride_q, cols, mask)
        out = y.to(q.dtype).to(tl.float32) + q.to(tl.float32)
        tl.store(out_ptr + rows[:, None] * stride_o + cols[None, :], out.to(q.dtype), mask=mask)


@triton.jit
def _rms_backward_kernel(g_ptr, x_ptr, q_ptr, dx_ptr, delta_ptr, drms_w_part_ptr, rrms_ptr, mean_ptr, rstd_ptr,
                         ln_w_ptr, ln_b_ptr, rms_w_ptr, num_rows, stride_g, stride_x, stride_q,
                         H: tl.constexpr, D: tl.constexpr, W: tl.constexpr, W_POW2: tl.constexpr,
                         ACT: tl.constexpr, HAS_LN_W: tl.constexpr, HAS_LN_B: tl.constexpr,
                         HAS_RMS_W: tl.constexpr, BLOCK_R: tl.constexpr):
    """Backward 1, the RMSNorm's backward over whole rows: dx = rrms·(g·w) − x·rrms³·mean(g·w·x) into dx_ptr
    (rows like q), dw's column partials at row ``program`` of their buffer, and for softmax Δ = rowsum(dx·a) per
    head with a = x − q̂ (W = H·D)."""
    cols = tl.arange(0, W_POW2)
    drms_w = tl.zeros([BLOCK_R, W_POW2], tl.float32)  # summed over the rows once, after the loop
    if HAS_RMS_W:
        rms_w = _load_cols(rms_w_ptr, cols, W)
    for tile in range(tl.program_id(0), tl.cdiv(num_rows, BLOCK_R), tl.num_programs(0)):
        rows, ok, cols, mask = _row_tile(tile, num_rows, W, W_POW2, BLOCK_R)
        g = _load_tile(g_ptr, rows, stride_g, cols, mask).to(tl.float32)
        x = _load_tile(x_ptr, rows, stride_x, cols, mask).to(tl.float32)
        rrms = tl.load(rrms_ptr + rows, mask=ok, other=0.0)
        gw = g
        if HAS_RMS_W:
            gw = g * rms_w[None, :]
            drms_w += g * x * rrms[:, None]
        gwx = tl.sum(gw * x, axis=1) / W
        dx = (rrms[:, None] * gw - x * (rrms * rrms * rrms * gwx)[:, None]).to(dx_ptr.dtype.element_ty)
        tl.store(dx_ptr + rows[:, None] * stride_q + cols[None, :], dx, mask=mask)
        if ACT == 0:
            q_hat = _normalize_rows(q_ptr, rows, ok, stride_q, cols, mask, mean_ptr, rstd_ptr, ln_w_ptr, ln_b_ptr, W,
                                    HAS_LN_W, HAS_LN_B)[1]
            delta = _head_sums(dx.to(tl.float32) * (x - q_hat.to(tl.float32)), H, D)
            heads = tl.arange(0, W_POW2 // D)
            tl.store(delta_ptr + rows[:, None] * H + heads[None, :], delta, mask=ok[:, None] & (heads[None, :] < H))
    if HAS_RMS_W:
        tl.store(drms_w_part_ptr + tl.program_id(0) * W + cols, tl.sum(drms_w, axis=0), mask=cols < W)


@triton.jit
def _normalize_rows(q_ptr, rows, ok, stride_q, cols, mask, mean_ptr, rstd_ptr, ln_w_ptr, ln_b_ptr, W: tl.constexpr,
                    HAS_LN_W: tl.constexpr, HAS_LN_B: tl.constexpr):
    """``_affine_layer_norm`` of whole rows, and their rstd."""
    q = _load_tile(q_ptr, rows, stride_q, cols, mask)
    mean = tl.load(mean_ptr + rows, mask=ok, other=0.0)
    rstd = tl.load(rstd_ptr + rows, mask=ok, other=0.0)
    q_norm, q_hat = _affine_layer_norm(q, mean, rstd, ln_w_ptr, ln_b_ptr, cols, cols < W, HAS_LN_W, HAS_LN_B)
    return q_norm, q_hat, rstd


@triton.jit
def _dq_hat_kernel(q_ptr, k_ptr, v_ptr, dx_ptr, dq_hat_ptr, delta_ptr, offsets_ptr, ln_w_ptr, ln_b_ptr,
                   mean_ptr, rstd_ptr, lse_ptr,
                   num_rows, num_seqs, stride_q, stride_kb, stride_kl, stride_vb, stride_vl, kv_len, scale,
                   H: tl.constexpr, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr,
                   HAS_LN_B: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr):
    """Backward 2, per (row block, sequence, head): dq̂ = dx + Σ_kv dS K (x = a + q̂), rounded to the input dtype
    as eager's gradient of q̂ is, into dq_hat_ptr (rows like q)."""
    b = tl.program_id(1)
    h = tl.program_id(2)
    row0, local, row_ok = _row_block(offsets_ptr, b, tl.program_id(0) * BLOCK_M, BLOCK_M)
    if tl.max(row_ok.to(tl.int32), axis=0) == 0:
        return
    rows = (row0 + local).to(tl.int64)
    q_src = _rows(q_ptr, num_rows, stride_q, BLOCK_M, H * D, D, TMA)
    dx_src = _rows(dx_ptr, num_rows, stride_q, BLOCK_M, H * D, D, TMA)
    k_src, kv_row0 = _kv_source(k_ptr, b, kv_len, num_seqs, stride_kb, stride_kl, BLOCK_N, H * D, D, TMA)
    v_src, v_row0 = _kv_source(v_ptr, b, kv_len, num_seqs, stride_vb, stride_vl, BLOCK_N, H * D, D, TMA)
    mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
    rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
    q_norm, q_hat = _normalized_q(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, D,
                                  HAS_LN_W, HAS_LN_B, TMA)
    dx = _load(dx_src, row0, local, row_ok, h * D, stride_q, D, TMA)
    if ACT == 0:
        lse = tl.load(lse_ptr + rows * H + h, mask=row_ok, other=0.0)
        delta = tl.load(delta_ptr + rows * H + h, mask=row_ok, other=0.0)
    dq_hat = dx.to(tl.float32)
    for n0 in range(0, kv_len, BLOCK_N):
        k, v, kv_ok = _kv_block(k_src, v_src, kv_row0, n0, h * D, stride_kl, stride_vl, kv_len, BLOCK_N, D, TMA)
        s = tl.dot(q_hat, tl.trans(k))
        dp = tl.dot(dx, tl.trans(v))
        if ACT == 0:
            p = tl.exp2((s * scale - lse[:, None]) * 1.4426950408889634)
            ds = tl.where(kv_ok[None, :], p * (dp - delta[:, None]) * scale, 0.0)
        else:
            ds = tl.where(kv_ok[None, :], scale * dp * _activation_grad(s, ACT), 0.0)
        dq_hat = tl.dot(ds.to(k.dtype), k, dq_hat)
    _store_rows(dq_hat_ptr, row0, local, row_ok, h * D, stride_q, dq_hat.to(q_hat.dtype), D)


@triton.jit
def _ln_backward_kernel(dq_ptr, q_ptr, g_ptr, mean_ptr, rstd_ptr, ln_w_ptr, dln_w_part_ptr, dln_b_part_ptr,
                        num_rows, stride_q, stride_g, W: tl.constexpr, W_POW2: tl.constexpr, HAS_LN_W: tl.constexpr,
                        HAS_LN_B: tl.constexpr, BLOCK_R: tl.constexpr):
    """Backward 4, the LayerNorm's backward over whole rows, in place: dq_ptr holds dq̂ and receives
    dq = g + rstd·(dq̂·γ − mean(dq̂·γ) − q̂n·mean(dq̂·γ·q̂n)); dγ, dβ column partials at row ``program``."""
    cols = tl.arange(0, W_POW2)
    dln_w = tl.zeros([BLOCK_R, W_POW2], tl.float32)  # summed over the rows once, after the loop
    dln_b = tl.zeros([BLOCK_R, W_POW2], tl.float32)
    if HAS_LN_W:
        ln_w = _load_cols(ln_w_ptr, cols, W)
    for tile in range(tl.program_id(0), tl.cdiv(num_rows, BLOCK_R), tl.num_programs(0)):
        rows, ok, cols, mask = _row_tile(tile, num_rows, W, W_POW2, BLOCK_R)
        dq_hat = _load_tile(dq_ptr, rows, stride_q, cols, mask).to(tl.float32)
        q_norm, _, rstd = _normalize_rows(q_ptr, rows, ok, stride_q, cols, mask, mean_ptr, rstd_ptr, None, None, W,
                                          False, False)
        g_ln = dq_hat
        if HAS_LN_W:
            dln_w += dq_hat * q_norm
            g_ln = dq_hat * ln_w[None, :]
        if HAS_LN_B:
            dln_b += dq_hat
        mean_g = tl.sum(g_ln, axis=1) / W
        mean_gq = tl.sum(g_ln * q_norm, axis=1) / W
        g = _load_tile(g_ptr, rows, stride_g, cols, mask).to(tl.float32)
        dq = g + rstd[:, None] * (g_ln - mean_g[:, None] - q_norm * mean_gq[:, None])
        tl.store(dq_ptr + rows[:, None] * stride_q + cols[None, :], dq.to(dq_ptr.dtype.element_ty), mask=mask)
    if HAS_LN_W:
        tl.store(dln_w_part_ptr + tl.program_id(0) * W + cols, tl.sum(dln_w, axis=0), mask=cols < W)
    if HAS_LN_B:
        tl.store(dln_b_part_ptr + tl.program_id(0) * W + cols, tl.sum(dln_b, axis=0), mask=cols < W)


@triton.jit
def _dkdv_kernel(q_ptr, k_ptr, v_ptr, dk_ptr, dv_ptr, dx_ptr, dq_hat_ptr, delta_ptr, offsets_ptr, ln_w_ptr,
                 ln_b_ptr, mean_ptr, rstd_ptr, lse_ptr,
                 num_rows, num_seqs, stride_q, stride_kb, stride_kl, stride_vb, stride_vl,
                 kv_len, scale,
                 H: tl.constexpr, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr,
                 HAS_LN_B: tl.constexpr, WITH_DQ_HAT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 TMA: tl.constexpr):
    """dK, dV of one KV block of one head of one sequence: a loop over the sequence's row blocks. dk, dv are
    contiguous [B, L, H·D]. WITH_DQ_HAT (the block holds every key, BLOCK_N ≥ kv_len): also dq̂ = dx + dS K of
    each row block, from the same dS, instead of ``_dq_hat_kernel`` recomputing S and dP."""
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    n0 = tl.program_id(0) * BLOCK_N
    q_src = _rows(q_ptr, num_rows, stride_q, BLOCK_M, H * D, D, TMA)
    dx_src = _rows(dx_ptr, num_rows, stride_q, BLOCK_M, H * D, D, TMA)
    k_src, kv_row0 = _kv_source(k_ptr, b, kv_len, num_seqs, stride_kb, stride_kl, BLOCK_N, H * D, D, TMA)
    v_src, v_row0 = _kv_source(v_ptr, b, kv_len, num_seqs, stride_vb, stride_vl, BLOCK_N, H * D, D, TMA)
    k, v, kv_ok = _kv_block(k_src, v_src, kv_row0, n0, h * D, stride_kl, stride_vl, kv_len, BLOCK_N, D, TMA)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    seq_len = tl.load(offsets_ptr + b + 1) - tl.load(offsets_ptr + b)
    for first in range(0, seq_len, BLOCK_M):
        row0, local, row_ok = _row_block(offsets_ptr, b, first, BLOCK_M)
        rows = (row0 + local).to(tl.int64)
        mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        q_norm_h, q_hat = _normalized_q(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, D,
                                 HAS_LN_W, HAS_LN_B, TMA)
        dx = _load(dx_src, row0, local, row_ok, h * D, stride_q, D, TMA)
        s_t = tl.dot(k, tl.trans(q_hat))  # [BLOCK_N, BLOCK_M]
        dp_t = tl.dot(v, tl.trans(dx))
        if ACT == 0:
            lse = tl.load(lse_ptr + rows * H + h, mask=row_ok, other=0.0)
            delta = tl.load(delta_ptr + rows * H + h, mask=row_ok, other=0.0)
            p_t = tl.where(row_ok[None, :], tl.exp2((s_t * scale - lse[None, :]) * 1.4426950408889634), 0.0)
            ds_t = p_t * (dp_t - delta[None, :]) * scale
        else:
            p_t = tl.where(row_ok[None, :], _activation(s_t, ACT) * scale, 0.0)
            ds_t = tl.where(row_ok[None, :], scale * dp_t * _activation_grad(s_t, ACT), 0.0)
        dv = tl.dot(p_t.to(dx.dtype), dx, dv)
        dk = tl.dot(ds_t.to(q_hat.dtype), q_hat, dk)
        if WITH_DQ_HAT:
            ds_t = tl.where(kv_ok[:, None], ds_t, 0.0)  # keys past kv_len (zero k rows) contribute nothing anyway
            dq_hat = tl.dot(tl.trans(ds_t.to(k.dtype)), k, dx.to(tl.float32))
            _store_rows(dq_hat_ptr, row0, local, row_ok, h * D, stride_q, dq_hat.to(q_hat.dtype), D)
    local_kv = tl.arange(0, BLOCK_N)
    _store_rows(dk_ptr, b * kv_len + n0, local_kv, kv_ok, h * D, H * D, dk.to(k.dtype), D)
    _store_rows(dv_ptr, b * kv_len + n0, local_kv, kv_ok, h * D, H * D, dv.to(v.dtype), D)


# --- host side ------------------------------------------------------------------------------------------------------

def unsupported_reason(q: Tensor, k: Tensor, v: Tensor, heads: int, activation: str) -> Optional[str]:
    """None when the kernels take these operands (q [T, H·D], k/v [B, L, H·D])."""
    if activation not in ACTIVATIONS:
        return f"activation {activation!r} (supported: {sorted(ACTIVATIONS)})"
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtypes q {q.dtype}, k {k.dtype}, v {v.dtype} (fp16/bf16/fp32, all alike)"
    if q.dtype == torch.float32 and q.is_cuda and not torch.backends.cuda.matmul.allow_tf32:
        return "fp32 on the GPU: the kernels' dots would round to TF32 (torch.backends.cuda.matmul.allow_tf32 is off)"
    if q.shape[-1] % heads:
        return f"width {q.shape[-1]} is not a multiple of {heads} heads"
    head_dim = q.shape[-1] // heads
    if head_dim not in (16, 32, 64, 128):
        return f"head_dim {head_dim} (16, 32, 64, 128)"
    if heads > 8:
        return f"{heads} heads (the kernel loops over the heads of a row: at most 8)"
    if k.shape[1] < 1:
        return "empty KV"
    if k.shape[0] * heads >= 65536:
        return f"{k.shape[0]} sequences × {heads} heads (a CUDA grid axis holds fewer than 65536 programs)"
    if max(q.numel(), k.numel(), v.numel()) >= MAX_ELEMENTS:
        return f"a tensor of {MAX_ELEMENTS} elements or more (int32 offsets)"
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        return "a head dimension is strided"
    return None


def default_config(kv_len: int, head_dim: int, kernel: str = "forward",
                   residual_in_acc: bool = False) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of a per-head kernel ("forward": the attention, "dq": dq̂,
    "dkdv", "merged": dK/dV with dq̂ over every key) when none is given. At the reference shape 64 × 64, 4 warps,
    2 stages is the fastest or close to it for each kernel; the merged kernel takes 32 × 128, 8 warps (64 rows
    spill at D = 128), faster than dq̂ + dK/dV. A forward holding every key for several row blocks was slower in
    every config tried and was removed. The forward with the residual in its accumulator at D = 128 takes 64 × 32
    keys (168 registers, three programs per SM), faster than 64 × 64. See
    docs/decisions.md#norm_attentiondefault_config"""
    if kernel == "merged":
        return 32, max(16, triton.next_power_of_2(kv_len)), 8, 2
    block_n = max(16, min(128 if head_dim <= 64 else 64, triton.next_power_of_2(kv_len)))
    if kernel == "forward" and residual_in_acc and head_dim > 64:
        block_n = min(block_n, 32)
    return 64, block_n, 4, 2


MAX_MERGED_KV = 128


# The row kernels (the two norms and their backward) hold BLOCK_R whole rows (all heads, ROW_ELEMENTS elements)
# per step, in a grid-stride loop over at most ROW_PROGRAMS_PER_SM programs per SM: few programs, so few rows of
# column partials (dγ, dβ, dw) to sum. 4096 elements, 4 warps, 16 programs per SM beat 8192 elements / 8 warps
# and one tile per program (a larger partial sum). The LayerNorm backward alone is faster with 1024-element
# tiles; the forward row kernels are slower with them, the RMSNorm backward level. See
# docs/decisions.md#norm_attentionrow_elements
ROW_ELEMENTS = 4096
LN_BACKWARD_ROW_ELEMENTS = 1024
ROW_WARPS = 4
ROW_PROGRAMS_PER_SM = 16


def _row_launch(num_rows: int, width: int, device: torch.device,
                elements: Optional[int] = None) -> tuple[tuple[int], dict]:
    """(grid, launch options) of a row kernel over [num_rows, width], in tiles of about ``elements`` (None:
    ROW_ELEMENTS)."""
    w_pow2 = triton.next_power_of_2(width)
    block_r = max(1, min(64, (elements or ROW_ELEMENTS) // w_pow2))
    tiles = triton.cdiv(num_rows, block_r)
    if device.type == "cuda":
        programs = min(tiles, ROW_PROGRAMS_PER_SM * num_sms(device.index or 0))
    else:  # the interpreter: a few programs, each looping over several tiles
        block_r, programs = 16, min(triton.cdiv(num_rows, 16), 3)
    return (max(programs, 1),), dict(W=width, W_POW2=w_pow2, BLOCK_R=block_r, num_warps=ROW_WARPS)




def _cached_launch_on(device: torch.device) -> bool:
    return tuning.current().attention_cached_launch and device.type == "cuda"


def _launch(kernel, grid: tuple, *args, **meta) -> None:
    """kernel[grid](*args, **meta): runtime arguments positional, constexprs and launch options by keyword."""
    device = args[0].device
    if not _cached_launch_on(device):
        kernel[grid](*args, **meta)
        return
    for name, default in _defaults(kernel.fn):  # the cached launcher passes every constexpr, defaults included
        meta.setdefault(name, default)
    launch.cached_launch(kernel, lambda: grid, args, meta, device, key_extra=grid)


@functools.lru_cache(maxsize=None)
def _defaults(fn) -> tuple:
    """(name, default) of each parameter of a kernel's Python function that has a default."""
    return tuple((name, p.default) for name, p in inspect.signature(fn).parameters.items()
                 if p.default is not inspect.Parameter.empty)


def _launch_options(config, tma: bool):
    block_m, block_n, warps, stages = config
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages, TMA=tma)


def _tma_ok(rows: list, kv: list) -> bool:
    """Whether every operand can be read through tensor descriptors: 16-byte aligned bases and row strides, row-major
    rows, and k/v whose [B, L, W] flattens to [B·L, W] without a copy."""
    def aligned(t):
        return t.data_ptr() % 16 == 0 and (t.stride(-2) * t.element_size()) % 16 == 0 and t.stride(-1) == 1

    return (all(aligned(t) for t in rows + kv)
            and all(t.stride(0) == t.shape[1] * t.stride(1) for t in kv))




def _use_tma(tma: Optional[bool], rows: list, kv: list) -> bool:
    if tma is None:
        tma = tuning.current().attention_tma and _tma_ok(rows, kv)
    elif tma and not _tma_ok(rows, kv):
        raise ValueError("tma=True, but an operand is not aligned or k/v do not flatten to [B·L, W]")
    if tma and rows[0].is_cuda:
        ensure_allocator()
    return tma


def forward(q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, max_len: int, heads: int,
            ln_weight: Optional[Tensor], ln_bias: Optional[Tensor], rms_weight: Optional[Tensor], scale: float,
            activation: str, ln_eps: float, rms_eps: float, config=None, tma: Optional[bool] = None
            ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """out [T, H·D], mean, rstd, rrms [T] fp32, lse [T, H] fp32 (softmax; else empty), x [T, H·D] (what the
    backward reads). ``config``: the attention kernel's; ``tma``: read through tensor descriptors (None:
    tuning's attention_tma, where the operands allow)."""
    T, width = q.shape
    B, kv_len = k.shape[0], k.shape[1]
    head_dim = width // heads
    act = ACTIVATIONS[activation]
    out, x = torch.empty_like(q), torch.empty_like(q)
    mean, rstd, rrms = (torch.empty(T, device=q.device, dtype=torch.float32) for _ in range(3))
    lse = torch.empty(T if act == 0 else 0, heads, device=q.device, dtype=torch.float32)
    if T == 0:
        return out, mean, rstd, rrms, lse, x
    residual_in_acc = act != 0 and tuning.current().attention_residual_in_acc
    config = config or default_config(kv_len, head_dim, "forward", residual_in_acc)
    tma = _use_tma(tma, [q], [k, v])
    row_grid, rows = _row_launch(T, width, q.device)
    _launch(_ln_stats_kernel, row_grid, q, mean, rstd, T, q.stride(0), ln_eps, **rows)
    _launch(_attention_kernel, (triton.cdiv(max_len, config[0]), B, heads),
            q, k, v, x, lse, offsets, ln_weight, ln_bias, mean, rstd,
            T, B, q.stride(0), x.stride(0), k.stride(0), k.stride(1), v.stride(0), v.stride(1), kv_len, scale,
            H=heads, D=head_dim, ACT=act, HAS_LN_W=ln_weight is not None, HAS_LN_B=ln_bias is not None,
            RESIDUAL_IN_ACC=residual_in_acc, **_launch_options(config, tma))
    _launch(_rms_out_kernel, row_grid, x, q, out, rrms, rms_weight, T, x.stride(0), q.stride(0), out.stride(0),
            rms_eps, HAS_RMS_W=rms_weight is not None, **rows)
    return out, mean, rstd, rrms, lse, x


def backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, max_len: int, heads: int,
             ln_weight: Optional[Tensor], ln_bias: Optional[Tensor], rms_weight: Optional[Tensor], scale: float,
             activation: str, mean: Tensor, rstd: Tensor, rrms: Tensor, lse: Tensor, x: Tensor, dq_config=None,
             dkdv_config=None, tma: Optional[bool] = None, merged: Optional[bool] = None, merged_config=None,
             kv_grad: bool = True):
    """(dq, dk, dv, dγ, dβ, dw); the norm weights' gradients are None where the weight is. ``merged`` (None:
    tuning's attention_merged_dq_hat): for KV ≤ MAX_MERGED_KV one dK/dV program per (sequence, head) holds every key and
    computes dq̂ too. ``kv_grad`` False (k and v need no gradient): dk, dv are None and only the dq̂ kernel runs."""
    T, width = q.shape
    B, kv_len = k.shape[0], k.shape[1]
    head_dim = width // heads
    act = ACTIVATIONS[activation]
    q, x, grad_out = q.contiguous(), x.contiguous(), grad_out.contiguous()
    dq = torch.empty_like(q)  # holds dq̂ until the LayerNorm backward turns it into dq in place
    dx = torch.empty_like(q)
    delta = torch.empty_like(lse)
    dk = torch.empty(k.shape if kv_grad else 0, device=k.device, dtype=k.dtype)
    dv = torch.empty(v.shape if kv_grad else 0, device=v.device, dtype=v.dtype)
    row_grid, rows = _row_launch(T, width, q.device)
    ln_grid, ln_rows = _row_launch(T, width, q.device, LN_BACKWARD_ROW_ELEMENTS)

    def partials(weight, grid):  # every row program writes its row
        return None if weight is None else torch.empty(grid[0], width, device=q.device, dtype=torch.float32)

    dln_w, dln_b, drms_w = partials(ln_weight, ln_grid), partials(ln_bias, ln_grid), partials(rms_weight, row_grid)
    if T == 0:
        dk.zero_(), dv.zero_()
        for p in (dln_w, dln_b, drms_w):
            if p is not None:
                p.zero_()
    else:
        dq_config = dq_config or default_config(kv_len, head_dim, "dq")
        dkdv_config = dkdv_config or default_config(kv_len, head_dim, "dkdv")
        tma = _use_tma(tma, [q, grad_out, dx], [k, v])
        flags = dict(H=heads, D=head_dim, HAS_LN_W=ln_weight is not None, HAS_LN_B=ln_bias is not None)
        _launch(_rms_backward_kernel, row_grid,
                grad_out, x, q, dx, delta, drms_w, rrms, mean, rstd, ln_weight, ln_bias, rms_weight,
                T, grad_out.stride(0), x.stride(0), q.stride(0), ACT=act, HAS_RMS_W=rms_weight is not None,
                **flags, **rows)
        if merged is None:
            merged = tuning.current().attention_merged_dq_hat
        common = (q, k, v, dk, dv, dx, dq, delta, offsets, ln_weight, ln_bias, mean, rstd, lse, T, B, q.stride(0),
                  k.stride(0), k.stride(1), v.stride(0), v.stride(1), kv_len, scale)
        if merged and kv_grad and kv_len <= MAX_MERGED_KV:
            merged_config = merged_config or default_config(kv_len, head_dim, "merged")
            if merged_config[1] < kv_len:  # one program per (sequence, head) must hold every key
                raise ValueError(f"merged_config {merged_config}: BLOCK_N must be at least kv_len {kv_len}")
            _launch(_dkdv_kernel, (1, B * heads), *common, ACT=act, WITH_DQ_HAT=True, **flags,
                    **_launch_options(merged_config, tma))
        else:
            _launch(_dq_hat_kernel, (triton.cdiv(max_len, dq_config[0]), B, heads),
                    q, k, v, dx, dq, delta, offsets, ln_weight, ln_bias, mean, rstd, lse,
                    T, B, q.stride(0), k.stride(0), k.stride(1), v.stride(0), v.stride(1), kv_len, scale, ACT=act,
                    **flags, **_launch_options(dq_config, tma))
            if kv_grad:
                _launch(_dkdv_kernel, (triton.cdiv(kv_len, dkdv_config[1]), B * heads),
                        *common, ACT=act, WITH_DQ_HAT=False, **flags, **_launch_options(dkdv_config, tma))
        _launch(_ln_backward_kernel, ln_grid, dq, q, grad_out, mean, rstd, ln_weight, dln_w, dln_b,
                T, q.stride(0), grad_out.stride(0), HAS_LN_W=ln_weight is not None,
                HAS_LN_B=ln_bias is not None, **ln_rows)

    def finish(part, weight):
        return None if part is None else part.sum(0).to(weight.dtype)

    if not kv_grad:
        dk = dv = None
    return dq, dk, dv, finish(dln_w, ln_weight), finish(dln_b, ln_bias), finish(drms_w, rms_weight)
