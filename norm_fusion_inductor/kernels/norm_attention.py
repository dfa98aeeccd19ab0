"""FlashNormAttention: LayerNorm → attention per head → residual → RMSNorm → residual in one kernel, forward and
backward (design.md §1.5).

Rows q [T, H·D] of B sequences (jagged: sequence b owns rows offsets[b] .. offsets[b+1]; a dense batch is the
uniform case), keys and values k, v [B, L, H·D] (short: L ≤ 256):

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
MAX_KV_LEN = 256
LOG2E = 1.4426950408889634


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
    """Rows ``first`` .. first + BLOCK_M of sequence b: global row indices (int64) and which of them exist."""
    seq_start = tl.load(offsets_ptr + b)
    seq_len = tl.load(offsets_ptr + b + 1) - seq_start
    local = first + tl.arange(0, BLOCK_M)
    return (seq_start + local).to(tl.int64), local < seq_len


@triton.jit
def _layer_norm_stats(q_rows, row_ok, eps, H: tl.constexpr, D: tl.constexpr):
    """Mean and rstd over all heads of each row (two passes; the second reads from L1/L2)."""
    total = tl.zeros([q_rows.shape[0]], tl.float32)
    for h in tl.static_range(H):
        total += tl.sum(tl.load(q_rows + h * D, mask=row_ok[:, None], other=0.0).to(tl.float32), axis=1)
    mean = total / (H * D)
    m2 = tl.zeros([q_rows.shape[0]], tl.float32)
    for h in tl.static_range(H):
        c = tl.load(q_rows + h * D, mask=row_ok[:, None], other=0.0).to(tl.float32) - mean[:, None]
        m2 += tl.sum(c * c, axis=1)
    return mean, tl.rsqrt(m2 / (H * D) + eps)


@triton.jit
def _normalized_q(q_rows, row_ok, head_cols, mean, rstd, ln_w_ptr, ln_b_ptr, HAS_LN_W: tl.constexpr,
                  HAS_LN_B: tl.constexpr):
    """(q, q̂n = (q − μ)·rstd, q̂ = q̂n·γ + β rounded to the input dtype) of one head, q and q̂n in fp32."""
    q = tl.load(q_rows, mask=row_ok[:, None], other=0.0)
    q_norm = (q.to(tl.float32) - mean[:, None]) * rstd[:, None]
    q_hat = q_norm
    if HAS_LN_W:
        q_hat = q_hat * tl.load(ln_w_ptr + head_cols).to(tl.float32)[None, :]
    if HAS_LN_B:
        q_hat = q_hat + tl.load(ln_b_ptr + head_cols).to(tl.float32)[None, :]
    return q.to(tl.float32), q_norm, q_hat.to(q.dtype)


@triton.jit
def _kv_block(k_head, v_head, n0, stride_kl, stride_vl, kv_len, cols, BLOCK_N: tl.constexpr):
    """Keys and values n0 .. n0 + BLOCK_N of one head (zero past kv_len), and which of them exist."""
    kv = n0 + tl.arange(0, BLOCK_N)
    kv_ok = kv < kv_len
    k = tl.load(k_head + kv[:, None] * stride_kl + cols[None, :], mask=kv_ok[:, None], other=0.0)
    v = tl.load(v_head + kv[:, None] * stride_vl + cols[None, :], mask=kv_ok[:, None], other=0.0)
    return k, v, kv_ok


@triton.jit
def _attend(q_hat, k_head, v_head, stride_kl, stride_vl, kv_len, scale, cols, ACT: tl.constexpr,
            BLOCK_N: tl.constexpr):
    """a = s·act(q̂ Kᵀ) V, or softmax(s·q̂ Kᵀ) V with its log-sum-exp (natural log); fp32 [BLOCK_M, D]."""
    acc = tl.zeros([q_hat.shape[0], q_hat.shape[1]], tl.float32)
    m_i = tl.full([q_hat.shape[0]], float("-inf"), tl.float32)
    l_i = tl.zeros([q_hat.shape[0]], tl.float32)
    for n0 in range(0, kv_len, BLOCK_N):
        k, v, kv_ok = _kv_block(k_head, v_head, n0, stride_kl, stride_vl, kv_len, cols, BLOCK_N)
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
def _head_x(q_rows, row_ok, cols, h, mean, rstd, ln_w_ptr, ln_b_ptr, k_head, v_head, stride_kl, stride_vl, kv_len,
            scale, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr, HAS_LN_B: tl.constexpr,
            BLOCK_N: tl.constexpr):
    """x = a + q̂ of head h, rounded as eager rounds it (a and q̂ to the input dtype, then their sum), and the
    log-sum-exp of its softmax."""
    _, _, q_hat = _normalized_q(q_rows + h * D, row_ok, h * D + cols, mean, rstd, ln_w_ptr, ln_b_ptr, HAS_LN_W,
                                HAS_LN_B)
    a, lse = _attend(q_hat, k_head, v_head, stride_kl, stride_vl, kv_len, scale, cols, ACT, BLOCK_N)
    return (a.to(q_hat.dtype).to(tl.float32) + q_hat.to(tl.float32)).to(q_hat.dtype), lse


@triton.jit
def _forward_kernel(q_ptr, k_ptr, v_ptr, out_ptr, offsets_ptr, ln_w_ptr, ln_b_ptr, rms_w_ptr,
                    mean_ptr, rstd_ptr, rrms_ptr, lse_ptr,
                    stride_q, stride_o, stride_kb, stride_kl, stride_vb, stride_vl,
                    kv_len, scale, ln_eps, rms_eps,
                    H: tl.constexpr, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr,
                    HAS_LN_B: tl.constexpr, HAS_RMS_W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(1)
    rows, row_ok = _row_block(offsets_ptr, b, tl.program_id(0) * BLOCK_M, BLOCK_M)
    if tl.max(row_ok.to(tl.int32), axis=0) == 0:
        return
    cols = tl.arange(0, D)
    q_rows = q_ptr + rows[:, None] * stride_q + cols[None, :]
    o_rows = out_ptr + rows[:, None] * stride_o + cols[None, :]
    mean, rstd = _layer_norm_stats(q_rows, row_ok, ln_eps, H, D)

    sum_x2 = tl.zeros([BLOCK_M], tl.float32)
    for h in tl.static_range(H):
        x, lse = _head_x(q_rows, row_ok, cols, h, mean, rstd, ln_w_ptr, ln_b_ptr, k_ptr + b * stride_kb + h * D,
                         v_ptr + b * stride_vb + h * D, stride_kl, stride_vl, kv_len, scale, D, ACT, HAS_LN_W,
                         HAS_LN_B, BLOCK_N)
        sum_x2 += tl.sum(x.to(tl.float32) * x.to(tl.float32), axis=1)
        tl.store(o_rows + h * D, x, mask=row_ok[:, None])
        if ACT == 0:
            tl.store(lse_ptr + rows * H + h, lse, mask=row_ok)
    rrms = tl.rsqrt(sum_x2 / (H * D) + rms_eps)
    tl.debug_barrier()  # the x tiles were stored by other threads of this program

    for h in tl.static_range(H):
        x = tl.load(o_rows + h * D, mask=row_ok[:, None], other=0.0).to(tl.float32)
        y = x * rrms[:, None]
        if HAS_RMS_W:
            y = y * tl.load(rms_w_ptr + h * D + cols).to(tl.float32)[None, :]
        q = tl.load(q_rows + h * D, mask=row_ok[:, None], other=0.0)
        out = y.to(q.dtype).to(tl.float32) + q.to(tl.float32)
        tl.store(o_rows + h * D, out.to(q.dtype), mask=row_ok[:, None])
    tl.store(mean_ptr + rows, mean, mask=row_ok)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    tl.store(rrms_ptr + rows, rrms, mask=row_ok)


@triton.jit
def _dq_kernel(q_ptr, k_ptr, v_ptr, dout_ptr, dq_ptr, dx_ptr, delta_ptr, offsets_ptr, ln_w_ptr, ln_b_ptr, rms_w_ptr,
               mean_ptr, rstd_ptr, rrms_ptr, lse_ptr, dln_w_part_ptr, dln_b_part_ptr, drms_w_part_ptr,
               stride_q, stride_g, stride_kb, stride_kl, stride_vb, stride_vl,
               kv_len, scale,
               H: tl.constexpr, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr,
               HAS_LN_B: tl.constexpr, HAS_RMS_W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dq (into dq_ptr, also the scratch for x and dq̂ of this program's rows), dx and Δ for the dK/dV kernel, and
    the column partials of dγ, dβ, dw at row ``part`` of their buffers. dx, dq, q share the row stride."""
    b = tl.program_id(1)
    part = b * tl.num_programs(0) + tl.program_id(0)
    rows, row_ok = _row_block(offsets_ptr, b, tl.program_id(0) * BLOCK_M, BLOCK_M)
    if tl.max(row_ok.to(tl.int32), axis=0) == 0:
        return
    cols = tl.arange(0, D)
    q_rows = q_ptr + rows[:, None] * stride_q + cols[None, :]
    g_rows = dout_ptr + rows[:, None] * stride_g + cols[None, :]
    scratch = dq_ptr + rows[:, None] * stride_q + cols[None, :]
    mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
    rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
    rrms = tl.load(rrms_ptr + rows, mask=row_ok, other=0.0)

    # 1. recompute x of every head (into the dq scratch) and mean(g·w·x) over the row
    gwx = tl.zeros([BLOCK_M], tl.float32)
    for h in tl.static_range(H):
        x, _ = _head_x(q_rows, row_ok, cols, h, mean, rstd, ln_w_ptr, ln_b_ptr, k_ptr + b * stride_kb + h * D,
                       v_ptr + b * stride_vb + h * D, stride_kl, stride_vl, kv_len, scale, D, ACT, HAS_LN_W,
                       HAS_LN_B, BLOCK_N)
        tl.store(scratch + h * D, x, mask=row_ok[:, None])
        gw = tl.load(g_rows + h * D, mask=row_ok[:, None], other=0.0).to(tl.float32)
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
        x = tl.load(scratch + h * D, mask=row_ok[:, None], other=0.0).to(tl.float32)
        g = tl.load(g_rows + h * D, mask=row_ok[:, None], other=0.0).to(tl.float32)
        gw = g
        if HAS_RMS_W:
            gw = g * tl.load(rms_w_ptr + head_cols).to(tl.float32)[None, :]
            tl.store(drms_w_part_ptr + part * (H * D) + head_cols, tl.sum(g * x * rrms[:, None], axis=0))
        dx = rrms[:, None] * gw - x * (rrms * rrms * rrms * gwx)[:, None]
        dx = dx.to(dx_ptr.dtype.element_ty)
        tl.store(dx_ptr + rows[:, None] * stride_q + head_cols[None, :], dx, mask=row_ok[:, None])

        _, q_norm, q_hat = _normalized_q(q_rows + h * D, row_ok, head_cols, mean, rstd, ln_w_ptr, ln_b_ptr,
                                         HAS_LN_W, HAS_LN_B)
        delta = tl.sum(dx.to(tl.float32) * (x - q_hat.to(tl.float32)), axis=1)  # rowsum(dx·a), a = x − q̂
        if ACT == 0:
            tl.store(delta_ptr + rows * H + h, delta, mask=row_ok)
            lse = tl.load(lse_ptr + rows * H + h, mask=row_ok, other=0.0)
        k_head = k_ptr + b * stride_kb + h * D
        v_head = v_ptr + b * stride_vb + h * D
        dq_hat = dx.to(tl.float32)
        for n0 in range(0, kv_len, BLOCK_N):
            k, v, kv_ok = _kv_block(k_head, v_head, n0, stride_kl, stride_vl, kv_len, cols, BLOCK_N)
            s = tl.dot(q_hat, tl.trans(k))
            dp = tl.dot(dx, tl.trans(v))
            if ACT == 0:
                p = tl.exp2((s * scale - lse[:, None]) * 1.4426950408889634)
                ds = tl.where(kv_ok[None, :], p * (dp - delta[:, None]) * scale, 0.0)
            else:
                ds = tl.where(kv_ok[None, :], scale * dp * _activation_grad(s, ACT), 0.0)
            dq_hat = tl.dot(ds.to(k.dtype), k, dq_hat)
        dq_hat = dq_hat.to(q_hat.dtype).to(tl.float32)  # eager's gradient of q̂ is a tensor of the input dtype
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
        tl.store(scratch + h * D, dq_hat.to(q_hat.dtype), mask=row_ok[:, None])
    mean_g = sum_g / (H * D)
    mean_gq = sum_gq / (H * D)
    tl.debug_barrier()

    # 3. dq = g + rstd·(dq̂·γ − mean(dq̂·γ) − q̂n·mean(dq̂·γ·q̂n))
    for h in tl.static_range(H):
        head_cols = h * D + cols
        dq_hat = tl.load(scratch + h * D, mask=row_ok[:, None], other=0.0).to(tl.float32)
        if HAS_LN_W:
            dq_hat = dq_hat * tl.load(ln_w_ptr + head_cols).to(tl.float32)[None, :]
        q = tl.load(q_rows + h * D, mask=row_ok[:, None], other=0.0)
        q_norm = (q.to(tl.float32) - mean[:, None]) * rstd[:, None]
        g = tl.load(g_rows + h * D, mask=row_ok[:, None], other=0.0).to(tl.float32)
        dq = g + rstd[:, None] * (dq_hat - mean_g[:, None] - q_norm * mean_gq[:, None])
        tl.store(scratch + h * D, dq.to(q.dtype), mask=row_ok[:, None])


@triton.jit
def _dkdv_kernel(q_ptr, k_ptr, v_ptr, dk_ptr, dv_ptr, dx_ptr, delta_ptr, offsets_ptr, ln_w_ptr, ln_b_ptr,
                 mean_ptr, rstd_ptr, lse_ptr,
                 stride_q, stride_kb, stride_kl, stride_vb, stride_vl,
                 kv_len, scale,
                 H: tl.constexpr, D: tl.constexpr, ACT: tl.constexpr, HAS_LN_W: tl.constexpr,
                 HAS_LN_B: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dK, dV of one KV block of one head of one sequence: a loop over the sequence's row blocks. dk, dv are
    contiguous [B, L, H·D]."""
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    cols = tl.arange(0, D)
    head_cols = h * D + cols
    kv = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    kv_ok = kv < kv_len
    k = tl.load(k_ptr + b * stride_kb + kv[:, None] * stride_kl + head_cols[None, :], mask=kv_ok[:, None], other=0.0)
    v = tl.load(v_ptr + b * stride_vb + kv[:, None] * stride_vl + head_cols[None, :], mask=kv_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    seq_len = tl.load(offsets_ptr + b + 1) - tl.load(offsets_ptr + b)
    for first in range(0, seq_len, BLOCK_M):
        rows, row_ok = _row_block(offsets_ptr, b, first, BLOCK_M)
        mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        _, _, q_hat = _normalized_q(q_ptr + rows[:, None] * stride_q + head_cols[None, :], row_ok, head_cols, mean,
                                    rstd, ln_w_ptr, ln_b_ptr, HAS_LN_W, HAS_LN_B)
        dx = tl.load(dx_ptr + rows[:, None] * stride_q + head_cols[None, :], mask=row_ok[:, None], other=0.0)
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
    out = b * kv_len * (H * D) + kv[:, None] * (H * D) + head_cols[None, :]
    tl.store(dk_ptr + out, dk.to(k.dtype), mask=kv_ok[:, None])
    tl.store(dv_ptr + out, dv.to(v.dtype), mask=kv_ok[:, None])


# --- host side ------------------------------------------------------------------------------------------------------

def unsupported_reason(q: Tensor, k: Tensor, v: Tensor, heads: int, activation: str) -> Optional[str]:
    """None when the kernels take these operands (q [T, H·D], k/v [B, L, H·D])."""
    if activation not in ACTIVATIONS:
        return f"activation {activation!r} (supported: {sorted(ACTIVATIONS)})"
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtypes q {q.dtype}, k {k.dtype}, v {v.dtype} (fp16/bf16/fp32, all alike)"
    if q.shape[-1] % heads:
        return f"width {q.shape[-1]} is not a multiple of {heads} heads"
    head_dim = q.shape[-1] // heads
    if head_dim not in (16, 32, 64, 128):
        return f"head_dim {head_dim} (16, 32, 64, 128)"
    if heads > 8:
        return f"{heads} heads (the kernel loops over the heads of a row: at most 8)"
    if not 1 <= k.shape[1] <= MAX_KV_LEN:
        return f"KV length {k.shape[1]} (1..{MAX_KV_LEN})"
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        return "a head dimension is strided"
    return None


def default_config(kv_len: int, head_dim: int, kernel: str = "forward") -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of a kernel when none is given. Measured on the H200 at the
    reference shape (benchmarks/results/attention-configs-*.log): 32-row blocks ran the forward and dq kernels
    fastest (the kernels are latency-bound: more resident programs help), 64-row blocks the dK/dV one."""
    block_n = max(16, min(128 if head_dim <= 64 else 64, triton.next_power_of_2(kv_len)))
    return (64 if kernel == "dkdv" else 32), block_n, 4, 2


def _launch_options(config):
    block_m, block_n, warps, stages = config
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages)


def forward(q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, max_len: int, heads: int,
            ln_weight: Optional[Tensor], ln_bias: Optional[Tensor], rms_weight: Optional[Tensor], scale: float,
            activation: str, ln_eps: float, rms_eps: float, config=None
            ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """out [T, H·D], mean, rstd, rrms [T] fp32, lse [T, H] fp32 (softmax; else empty)."""
    T, width = q.shape
    B, kv_len = k.shape[0], k.shape[1]
    act = ACTIVATIONS[activation]
    out = torch.empty_like(q)
    mean, rstd, rrms = (torch.empty(T, device=q.device, dtype=torch.float32) for _ in range(3))
    lse = torch.empty(T if act == 0 else 0, heads, device=q.device, dtype=torch.float32)
    config = config or default_config(kv_len, width // heads)
    grid = (triton.cdiv(max_len, config[0]), B)
    _forward_kernel[grid](q, k, v, out, offsets, ln_weight, ln_bias, rms_weight, mean, rstd, rrms, lse,
                          q.stride(0), out.stride(0), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                          kv_len, scale, ln_eps, rms_eps,
                          H=heads, D=width // heads, ACT=act, HAS_LN_W=ln_weight is not None,
                          HAS_LN_B=ln_bias is not None, HAS_RMS_W=rms_weight is not None,
                          **_launch_options(config))
    return out, mean, rstd, rrms, lse


def backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, max_len: int, heads: int,
             ln_weight: Optional[Tensor], ln_bias: Optional[Tensor], rms_weight: Optional[Tensor], scale: float,
             activation: str, mean: Tensor, rstd: Tensor, rrms: Tensor, lse: Tensor, dq_config=None,
             dkdv_config=None):
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

    def partials(weight):
        return None if weight is None else torch.zeros(B * m_blocks, width, device=q.device, dtype=torch.float32)

    dln_w, dln_b, drms_w = partials(ln_weight), partials(ln_bias), partials(rms_weight)
    flags = dict(H=heads, D=head_dim, ACT=act, HAS_LN_W=ln_weight is not None, HAS_LN_B=ln_bias is not None)
    _dq_kernel[(m_blocks, B)](q, k, v, grad_out, dq, dx, delta, offsets, ln_weight, ln_bias, rms_weight,
                              mean, rstd, rrms, lse, dln_w, dln_b, drms_w,
                              q.stride(0), grad_out.stride(0), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                              kv_len, scale, HAS_RMS_W=rms_weight is not None, **flags,
                              **_launch_options(dq_config))
    _dkdv_kernel[(triton.cdiv(kv_len, dkdv_config[1]), B * heads)](
        q, k, v, dk, dv, dx, delta, offsets, ln_weight, ln_bias, mean, rstd, lse,
        q.stride(0), k.stride(0), k.stride(1), v.stride(0), v.stride(1), kv_len, scale, **flags,
        **_launch_options(dkdv_config))

    def finish(part, weight):
        return None if part is None else part.sum(0).to(weight.dtype)

    return dq, dk, dv, finish(dln_w, ln_weight), finish(dln_b, ln_bias), finish(drms_w, rms_weight)
