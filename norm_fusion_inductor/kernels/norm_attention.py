"""FlashNormAttention: LayerNorm → attention per head → residual → RMSNorm → residual in one kernel, forward and
backward (design.md §1.5).

Rows q [T, H·D] of B sequences (jagged: sequence b owns rows offsets[b] .. offsets[b+1]; a dense batch is the
uniform case), keys and values k, v [B, L, H·D] (any L: every kernel walks the keys in BLOCK_N blocks, the
softmax online):

    q̂   = LN(q)·γ + β                        mean/rstd over the whole H·D row, all heads
    a_h = s · act(q̂_h K_hᵀ) V_h              GDPA: act ∈ {gelu, gelu_tanh, silu, relu2}, no normalization
       or softmax(s · q̂_h K_hᵀ) V_h
    x   = a + q̂
    out = x · rrms · w + q,   rrms = rsqrt(mean(x²) + eps)   over the whole H·D row

q̂, a and x are rounded to the input dtype where eager rounds them, so the kernel computes what the eager block
computes, without writing q̂, a or x to memory.

Forward: a program owns BLOCK_M rows of one sequence and loops over the heads (H is small), so both norms see
whole rows and no program waits for another. The x of every head is stored into ``out`` (the program's own rows,
hot in L2) and rescaled by a second sweep once rrms is known: x of all heads does not fit in registers.

Backward, from q, k, v and the saved mean, rstd, rrms (and the log-sum-exp for softmax); the rest is recomputed:

    dx   = rrms·(g·w) − x·rrms³·mean(g·w·x)                g = dout (out = y + q also gives dq a g)
    dq̂   = dx + Σ_kv dS K                                  x = a + q̂, S = q̂_h K_hᵀ
    GDPA:    dV = s·act(S)ᵀ dx,  dS = s·(dx Vᵀ)·act'(S)
    softmax: P = exp(s·S − lse),  dV = Pᵀ dx,  dS = s·P·(dx Vᵀ − Δ),  Δ = rowsum(dx·a)
    dK   = dSᵀ q̂
    dq   = g + rstd·(dq̂·γ − mean(dq̂·γ) − q̂n·mean(dq̂·γ·q̂n)),   q̂n = (q − μ)·rstd
    dγ = Σ_rows dq̂·q̂n,  dβ = Σ_rows dq̂,  dw = Σ_rows g·x·rrms   (per-program partials, summed on the host:
    deterministic)

Two kernels: ``_dq_kernel`` per row block (both norms' backward are row-wide, so it owns all heads of its rows)
writes dx and Δ; ``_dkdv_kernel`` per (sequence, head, KV block) loops over the sequence's row blocks and reads
them.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

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
        return ptr + b * stride_b, 0


@triton.jit
def _store_rows(ptr, row0, local, ok, col0, stride, value, D: tl.constexpr):
    """Masked store of rows row0 + local (a TMA store would write into the next sequence's rows)."""
    rows = (row0 + local).to(tl.int64)
    tl.store(ptr + rows[:, None] * stride + col0 + tl.arange(0, D)[None, :], value, mask=ok[:, None])


@triton.jit
def _load_own_rows(ptr, row0, local, ok, col0, stride, D: tl.constexpr):
    """Rows this program stored itself (the x / dq̂ scratch): plain loads, since TMA reads through the async proxy
    and would need a proxy fence to see them."""
    rows = (row0 + local).to(tl.int64)
    return tl.load(ptr + rows[:, None] * stride + col0 + tl.arange(0, D)[None, :], mask=ok[:, None],
                   other=0.0).to(tl.float32)


@triton.jit
def _layer_norm_stats(q_src, row0, local, row_ok, stride_q, eps, H: tl.constexpr, D: tl.constexpr,
                      TMA: tl.constexpr):
    """Mean and rstd over all heads of each row (two passes; the second reads from L1/L2)."""
    total = tl.zeros([local.shape[0]], tl.float32)
    for h in tl.static_range(H):
        total += tl.sum(_load(q_src, row0, local, row_ok, h * D, stride_q, D, TMA).to(tl.float32), axis=1)
    mean = total / (H * D)
    m2 = tl.zeros([local.shape[0]], tl.float32)
    for h in tl.static_range(H):
        c = _load(q_src, row0, local, row_ok, h * D, stride_q, D, TMA).to(tl.float32) - mean[:, None]
        m2 += tl.sum(tl.where(row_ok[:, None], c * c, 0.0), axis=1)
    return mean, tl.rsqrt(m2 / (H * D) + eps)


@triton.jit
def _normalized_q(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, D: tl.constexpr,
                  HAS_LN_W: tl.constexpr, HAS_LN_B: tl.constexpr, TMA: tl.constexpr):
    """(q̂n = (q − μ)·rstd in fp32, q̂ = q̂n·γ + β rounded to the input dtype) of head h."""
    q = _load(q_src, row0, local, row_ok, h * D, stride_q, D, TMA)
    head_cols = h * D + tl.arange(0, D)
    q_norm = (q.to(tl.float32) - mean[:, None]) * rstd[:, None]
    q_hat = q_norm
    if HAS_LN_W:
        q_hat = q_hat * tl.load(ln_w_ptr + head_cols).to(tl.float32)[None, :]
    if HAS_LN_B:
        q_hat = q_hat + tl.load(ln_b_ptr + head_cols).to(tl.float32)[None, :]
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
            BLOCK_N: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr):
    """a = s·act(q̂ Kᵀ) V, or softmax(s·q̂ Kᵀ) V with its log-sum-exp (natural log); fp32 [BLOCK_M, D]."""
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
            HAS_LN_B: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr):
    """x = a + q̂ of head h, rounded as eager rounds it (a and q̂ to the input dtype, then their sum), and the
    log-sum-exp of its softmax."""
    q_norm_h, q_hat = _normalized_q(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, D,
                             HAS_LN_W, HAS_LN_B, TMA)
    a, lse = _attend(q_hat, k_src, v_src, kv_row0, h * D, stride_kl, stride_vl, kv_len, scale, ACT, BLOCK_N, D,
                     TMA)
    return (a.to(q_hat.dtype).to(tl.float32) + q_hat.to(tl.float32)).to(q_hat.dtype), lse


@triton.jit
def _forward_kernel(q_ptr, k_ptr, v_ptr, out_ptr, offsets_ptr, ln_w_ptr, ln_b_ptr, rms_w_ptr,
                    mean_ptr, rstd_ptr, rrms_ptr, lse_ptr,
                    num_rows, num_seqs, stride_q, stride_o, stride_kb, stride_kl, stride_vb, stride_vl,
                    kv_len, scale, ln_eps, rms_eps,
                    H: tl.constexpr, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr,
                    HAS_LN_B: tl.constexpr, HAS_RMS_W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    TMA: tl.constexpr):
    b = tl.program_id(1)
    row0, local, row_ok = _row_block(offsets_ptr, b, tl.program_id(0) * BLOCK_M, BLOCK_M)
    if tl.max(row_ok.to(tl.int32), axis=0) == 0:
        return
    rows = (row0 + local).to(tl.int64)
    q_src = _rows(q_ptr, num_rows, stride_q, BLOCK_M, H * D, D, TMA)
    k_src, kv_row0 = _kv_source(k_ptr, b, kv_len, num_seqs, stride_kb, stride_kl, BLOCK_N, H * D, D, TMA)
    v_src, v_row0 = _kv_source(v_ptr, b, kv_len, num_seqs, stride_vb, stride_vl, BLOCK_N, H * D, D, TMA)
    mean, rstd = _layer_norm_stats(q_src, row0, local, row_ok, stride_q, ln_eps, H, D, TMA)

    sum_x2 = tl.zeros([BLOCK_M], tl.float32)
    for h in tl.static_range(H):
        x, lse = _head_x(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, k_src, v_src,
                         kv_row0, stride_kl, stride_vl, kv_len, scale, D, ACT, HAS_LN_W, HAS_LN_B, BLOCK_N, TMA)
        sum_x2 += tl.sum(x.to(tl.float32) * x.to(tl.float32), axis=1)
        _store_rows(out_ptr, row0, local, row_ok, h * D, stride_o, x, D)
        if ACT == 0:
            tl.store(lse_ptr + rows * H + h, lse, mask=row_ok)
    rrms = tl.rsqrt(sum_x2 / (H * D) + rms_eps)
    tl.debug_barrier()  # the x tiles were stored by other threads of this program

    for h in tl.static_range(H):
        y = _load_own_rows(out_ptr, row0, local, row_ok, h * D, stride_o, D) * rrms[:, None]
        if HAS_RMS_W:
            y = y * tl.load(rms_w_ptr + h * D + tl.arange(0, D)).to(tl.float32)[None, :]
        q = _load(q_src, row0, local, row_ok, h * D, stride_q, D, TMA)
        out = y.to(q.dtype).to(tl.float32) + q.to(tl.float32)
        _store_rows(out_ptr, row0, local, row_ok, h * D, stride_o, out.to(q.dtype), D)
    tl.store(mean_ptr + rows, mean, mask=row_ok)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    tl.store(rrms_ptr + rows, rrms, mask=row_ok)


@triton.jit
def _dq_kernel(q_ptr, k_ptr, v_ptr, dout_ptr, dq_ptr, dx_ptr, delta_ptr, offsets_ptr, ln_w_ptr, ln_b_ptr, rms_w_ptr,
               mean_ptr, rstd_ptr, rrms_ptr, lse_ptr, dln_w_part_ptr, dln_b_part_ptr, drms_w_part_ptr,
               num_rows, num_seqs, stride_q, stride_g, stride_kb, stride_kl, stride_vb, stride_vl,
               kv_len, scale,
               H: tl.constexpr, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr,
               HAS_LN_B: tl.constexpr, HAS_RMS_W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               TMA: tl.constexpr):
    """dq (into dq_ptr, also the scratch for x and dq̂ of this program's rows), dx and Δ for the dK/dV kernel, and
    the column partials of dγ, dβ, dw at row ``part`` of their buffers. dx, dq, q share the row stride."""
    b = tl.program_id(1)
    part = b * tl.num_programs(0) + tl.program_id(0)
    row0, local, row_ok = _row_block(offsets_ptr, b, tl.program_id(0) * BLOCK_M, BLOCK_M)
    if tl.max(row_ok.to(tl.int32), axis=0) == 0:
        return
    rows = (row0 + local).to(tl.int64)
    cols = tl.arange(0, D)
    q_src = _rows(q_ptr, num_rows, stride_q, BLOCK_M, H * D, D, TMA)
    g_src = _rows(dout_ptr, num_rows, stride_g, BLOCK_M, H * D, D, TMA)
    k_src, kv_row0 = _kv_source(k_ptr, b, kv_len, num_seqs, stride_kb, stride_kl, BLOCK_N, H * D, D, TMA)
    v_src, v_row0 = _kv_source(v_ptr, b, kv_len, num_seqs, stride_vb, stride_vl, BLOCK_N, H * D, D, TMA)
    mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
    rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
    rrms = tl.load(rrms_ptr + rows, mask=row_ok, other=0.0)

    # 1. recompute x of every head (into the dq scratch) and mean(g·w·x) over the row
    gwx = tl.zeros([BLOCK_M], tl.float32)
    for h in tl.static_range(H):
        x, lse_h = _head_x(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, k_src, v_src,
                           kv_row0, stride_kl, stride_vl, kv_len, scale, D, ACT, HAS_LN_W, HAS_LN_B, BLOCK_N, TMA)
        _store_rows(dq_ptr, row0, local, row_ok, h * D, stride_q, x, D)
        gw = _load(g_src, row0, local, row_ok, h * D, stride_g, D, TMA).to(tl.float32)
        if HAS_RMS_W:
            gw = gw * tl.load(rms_w_ptr + h * D + cols).to(tl.float32)[None, :]
        gwx += tl.sum(gw * x.to(tl.float32), axis=1)
    gwx = gwx / (H * D)
    tl.debug_barrier()

    # 2. per head: dx (RMSNorm backward), then dq̂ = dx + dS K (into the scratch), LayerNorm-backward row sums
    sum_g = tl.zeros([BLOCK_M], tl.float32)
    sum_gq = tl.zeros([BLOCK_M], tl.float32)
    for h in tl.static_range(H):
        head_cols = h * D + cols
        x = _load_own_rows(dq_ptr, row0, local, row_ok, h * D, stride_q, D)
        g = _load(g_src, row0, local, row_ok, h * D, stride_g, D, TMA).to(tl.float32)
        gw = g
        if HAS_RMS_W:
            gw = g * tl.load(rms_w_ptr + head_cols).to(tl.float32)[None, :]
            tl.store(drms_w_part_ptr + part * (H * D) + head_cols, tl.sum(g * x * rrms[:, None], axis=0))
        dx = rrms[:, None] * gw - x * (rrms * rrms * rrms * gwx)[:, None]
        dx = dx.to(dx_ptr.dtype.element_ty)
        _store_rows(dx_ptr, row0, local, row_ok, h * D, stride_q, dx, D)

        q_norm_h, q_hat = _normalized_q(q_src, row0, local, row_ok, stride_q, h, mean, rstd, ln_w_ptr, ln_b_ptr, D,
                                 HAS_LN_W, HAS_LN_B, TMA)
        delta = tl.sum(dx.to(tl.float32) * (x - q_hat.to(tl.float32)), axis=1)  # rowsum(dx·a), a = x − q̂
        if ACT == 0:
            tl.store(delta_ptr + rows * H + h, delta, mask=row_ok)
            lse = tl.load(lse_ptr + rows * H + h, mask=row_ok, other=0.0)
        dq_hat = dx.to(tl.float32)
        for n0 in range(0, kv_len, BLOCK_N):
            k, v, kv_ok = _kv_block(k_src, v_src, kv_row0, n0, h * D, stride_kl, stride_vl, kv_len, BLOCK_N, D,
                                    TMA)
            s = tl.dot(q_hat, tl.trans(k))
            dp = tl.dot(dx, tl.trans(v))
            if ACT == 0:
                p = tl.exp2((s * scale - lse[:, None]) * 1.4426950408889634)
                ds = tl.where(kv_ok[None, :], p * (dp - delta[:, None]) * scale, 0.0)
            else:
                ds = tl.where(kv_ok[None, :], scale * dp * _activation_grad(s, ACT), 0.0)
            dq_hat = tl.dot(ds.to(k.dtype), k, dq_hat)
        dq_hat = dq_hat.to(q_hat.dtype).to(tl.float32)  # eager's gradient of q̂ is a tensor of the input dtype
        # q̂n again from q (an L1/L2 hit) rather than kept live through the KV loop's dots: registers are the limit
        q_norm = (_load(q_src, row0, local, row_ok, h * D, stride_q, D, TMA).to(tl.float32) - mean[:, None]) \
            * rstd[:, None]
        if HAS_LN_W:
            tl.store(dln_w_part_ptr + part * (H * D) + head_cols, tl.sum(dq_hat * q_norm, axis=0))
            g_ln = dq_hat * tl.load(ln_w_ptr + head_cols).to(tl.float32)[None, :]
        else:
            g_ln = dq_hat
        if HAS_LN_B:
            tl.store(dln_b_part_ptr + part * (H * D) + head_cols, tl.sum(dq_hat, axis=0))
        sum_g += tl.sum(g_ln, axis=1)
        sum_gq += tl.sum(g_ln * q_norm, axis=1)
        tl.debug_barrier()  # every thread has read x of this head before dq̂ overwrites it
        _store_rows(dq_ptr, row0, local, row_ok, h * D, stride_q, dq_hat.to(q_hat.dtype), D)
    mean_g = sum_g / (H * D)
    mean_gq = sum_gq / (H * D)
    tl.debug_barrier()

    # 3. dq = g + rstd·(dq̂·γ − mean(dq̂·γ) − q̂n·mean(dq̂·γ·q̂n))
    for h in tl.static_range(H):
        dq_hat = _load_own_rows(dq_ptr, row0, local, row_ok, h * D, stride_q, D)
        if HAS_LN_W:
            dq_hat = dq_hat * tl.load(ln_w_ptr + h * D + cols).to(tl.float32)[None, :]
        q = _load(q_src, row0, local, row_ok, h * D, stride_q, D, TMA)
        q_norm = (q.to(tl.float32) - mean[:, None]) * rstd[:, None]
        g = _load(g_src, row0, local, row_ok, h * D, stride_g, D, TMA).to(tl.float32)
        dq = g + rstd[:, None] * (dq_hat - mean_g[:, None] - q_norm * mean_gq[:, None])
        _store_rows(dq_ptr, row0, local, row_ok, h * D, stride_q, dq.to(q.dtype), D)


@triton.jit
def _dkdv_kernel(q_ptr, k_ptr, v_ptr, dk_ptr, dv_ptr, dx_ptr, delta_ptr, offsets_ptr, ln_w_ptr, ln_b_ptr,
                 mean_ptr, rstd_ptr, lse_ptr,
                 num_rows, num_seqs, stride_q, stride_kb, stride_kl, stride_vb, stride_vl,
                 kv_len, scale,
                 H: tl.constexpr, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr,
                 HAS_LN_B: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr):
    """dK, dV of one KV block of one head of one sequence: a loop over the sequence's row blocks. dk, dv are
    contiguous [B, L, H·D]."""
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
    if max(q.numel(), k.numel(), v.numel()) >= MAX_ELEMENTS:
        return f"a tensor of {MAX_ELEMENTS} elements or more (int32 offsets)"
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        return "a head dimension is strided"
    return None


def default_config(kv_len: int, head_dim: int, kernel: str = "forward") -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of a kernel when none is given. Measured on the H200 at the
    reference shape (benchmarks/results/attention-configs-*.log): 32-row blocks ran the forward and dq kernels
    fastest (the kernels are latency-bound: more resident programs help), 64-row blocks the dK/dV one."""
    block_n = max(16, min(128 if head_dim <= 64 else 64, triton.next_power_of_2(kv_len)))
    return (64 if kernel == "dkdv" else 32), block_n, 4, 2


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


# The descriptor path is right in the interpreter but has not run on a GPU yet (written 2026-11-30 after the last
# device call): the pointer path, measured and validated on the H200, stays the default until it has.
TMA_BY_DEFAULT = False


def _use_tma(tma: Optional[bool], rows: list, kv: list) -> bool:
    if tma is None:
        tma = TMA_BY_DEFAULT and _tma_ok(rows, kv)
    elif tma and not _tma_ok(rows, kv):
        raise ValueError("tma=True, but an operand is not aligned or k/v do not flatten to [B·L, W]")
    if tma and rows[0].is_cuda:
        from .norm_gemm import _ensure_allocator

        _ensure_allocator()
    return tma


def forward(q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, max_len: int, heads: int,
            ln_weight: Optional[Tensor], ln_bias: Optional[Tensor], rms_weight: Optional[Tensor], scale: float,
            activation: str, ln_eps: float, rms_eps: float, config=None, tma: Optional[bool] = None
            ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """out [T, H·D], mean, rstd, rrms [T] fp32, lse [T, H] fp32 (softmax; else empty). ``tma``: read through
    tensor descriptors (None: TMA_BY_DEFAULT, where the operands allow)."""
    T, width = q.shape
    B, kv_len = k.shape[0], k.shape[1]
    act = ACTIVATIONS[activation]
    out = torch.empty_like(q)
    mean, rstd, rrms = (torch.empty(T, device=q.device, dtype=torch.float32) for _ in range(3))
    lse = torch.empty(T if act == 0 else 0, heads, device=q.device, dtype=torch.float32)
    config = config or default_config(kv_len, width // heads)
    tma = _use_tma(tma, [q], [k, v])
    grid = (triton.cdiv(max_len, config[0]), B)
    _forward_kernel[grid](q, k, v, out, offsets, ln_weight, ln_bias, rms_weight, mean, rstd, rrms, lse,
                          T, B, q.stride(0), out.stride(0), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                          kv_len, scale, ln_eps, rms_eps,
                          H=heads, D=width // heads, ACT=act, HAS_LN_W=ln_weight is not None,
                          HAS_LN_B=ln_bias is not None, HAS_RMS_W=rms_weight is not None,
                          **_launch_options(config, tma))
    return out, mean, rstd, rrms, lse


def backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, max_len: int, heads: int,
             ln_weight: Optional[Tensor], ln_bias: Optional[Tensor], rms_weight: Optional[Tensor], scale: float,
             activation: str, mean: Tensor, rstd: Tensor, rrms: Tensor, lse: Tensor, dq_config=None,
             dkdv_config=None, tma: Optional[bool] = None):
    """(dq, dk, dv, dγ, dβ, dw); the norm weights' gradients are None where the weight is."""
    T, width = q.shape
    B, kv_len = k.shape[0], k.shape[1]
    head_dim = width // heads
    act = ACTIVATIONS[activation]
    q = q.contiguous()
    grad_out = grad_out.contiguous()
    dq = torch.empty_like(q)
    dx = torch.empty_like(q)
    delta = torch.empty_like(lse)
    dk = torch.empty(k.shape, device=k.device, dtype=k.dtype)
    dv = torch.empty(v.shape, device=v.device, dtype=v.dtype)
    dq_config = dq_config or default_config(kv_len, head_dim, "dq")
    dkdv_config = dkdv_config or default_config(kv_len, head_dim, "dkdv")
    m_blocks = triton.cdiv(max_len, dq_config[0])
    tma = _use_tma(tma, [q, grad_out, dx], [k, v])

    def partials(weight):
        return None if weight is None else torch.zeros(B * m_blocks, width, device=q.device, dtype=torch.float32)

    dln_w, dln_b, drms_w = partials(ln_weight), partials(ln_bias), partials(rms_weight)
    flags = dict(H=heads, D=head_dim, ACT=act, HAS_LN_W=ln_weight is not None, HAS_LN_B=ln_bias is not None)
    _dq_kernel[(m_blocks, B)](q, k, v, grad_out, dq, dx, delta, offsets, ln_weight, ln_bias, rms_weight,
                              mean, rstd, rrms, lse, dln_w, dln_b, drms_w,
                              T, B, q.stride(0), grad_out.stride(0), k.stride(0), k.stride(1), v.stride(0),
                              v.stride(1), kv_len, scale, HAS_RMS_W=rms_weight is not None, **flags,
                              **_launch_options(dq_config, tma))
    _dkdv_kernel[(triton.cdiv(kv_len, dkdv_config[1]), B * heads)](
        q, k, v, dk, dv, dx, delta, offsets, ln_weight, ln_bias, mean, rstd, lse,
        T, B, q.stride(0), k.stride(0), k.stride(1), v.stride(0), v.stride(1), kv_len, scale, **flags,
        **_launch_options(dkdv_config, tma))

    def finish(part, weight):
        return None if part is None else part.sum(0).to(weight.dtype)

    return dq, dk, dv, finish(dln_w, ln_weight), finish(dln_b, ln_bias), finish(drms_w, rms_weight)
