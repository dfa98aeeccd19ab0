"""QK-norm attention: the per-head RMSNorm of q and k (and the rotary embedding after it) fused into a flash
attention kernel, forward and backward, causal or not, grouped-query (design.md §1.5, last paragraph).

q [B, Hq, L, D], k, v [B, Hk, S, D] (any strides, unit stride along D), Hq = G·Hk:

    n   = (x · rrms) · w,  rrms = rsqrt(mean_D(x²) + eps)        per (token, head): no exchange between programs
    x̂   = rope(n) = n · cos + rotate_half(n) · sin,  rotate_half([n₁, n₂]) = [−n₂, n₁]   (halves of D; optional)
    out = softmax(s · q̂ k̂ᵀ [causal: key ≤ query]) v               k̂ and v of head h // G

x·rrms, n and x̂ are rounded to the input dtype where HF model code rounds them (Qwen3RMSNorm, then
apply_rotary_pos_emb).

Forward. k̂ is made once per (token, kv head) by ``_normalize_kernel``, which also stores rrms_k: normalizing k
inside the attention's KV loop would redo it for every query block that reads the tile (L/BLOCK_M/2 · G times
at the LLM shape), on the CUDA cores that the softmax already keeps busy. q̂ is made in the attention kernel's
prologue, once per program; for training it is also stored, because the dK/dV kernel reads q̂ per (key block,
query block) pair and recomputing it there would again cost once per pair.

Backward (the FlashAttention-2 form; base-2 exponentials, lse saved in those units):

    P = exp(s·q̂k̂ᵀ − lse),  Δ = rowsum(out · dout)
    dv = Σ_heads Pᵀ dout,   dS = P · (dout vᵀ − Δ),   dq̂ = s · dS k̂,   dk̂ = s · Σ_heads dSᵀ q̂

and each norm's backward is the epilogue of the kernel that produces its gradient (dq: ``_dq_kernel``, dk:
``_dkdv_kernel``, after summing the group's heads):

    dn = dx̂ · cos + rotate_halfᵀ(dx̂ · sin),  rotate_halfᵀ([a, b]) = [b, −a]
    g = dn · w,  n̂ = x · rrms,  dx = rrms · (g − n̂ · mean_D(g · n̂)),  dw = Σ_rows dn · n̂

dw comes from per-program partials summed on the host (deterministic, no atomics).
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import tuning

LOG2E = 1.4426950408889634


@triton.jit
def _halves(x, ROWS: tl.constexpr, D: tl.constexpr):
    """x [ROWS, D] → (x[:, :D/2], x[:, D/2:])."""
    return tl.split(tl.permute(tl.reshape(x, (ROWS, 2, D // 2)), (0, 2, 1)))


@triton.jit
def _whole(a, b, ROWS: tl.constexpr, D: tl.constexpr):
    """The inverse of ``_halves``."""
    return tl.reshape(tl.permute(tl.join(a, b), (0, 2, 1)), (ROWS, D))


@triton.jit
def _load_halves(ptr, rows, ok, stride_row, D: tl.constexpr):
    half = tl.arange(0, D // 2)
    at = ptr + rows[:, None] * stride_row + half[None, :]
    return (tl.load(at, mask=ok[:, None], other=0.0).to(tl.float32),
            tl.load(at + D // 2, mask=ok[:, None], other=0.0).to(tl.float32))


@triton.jit
def _store_halves(ptr, rows, ok, stride_row, a, b, D: tl.constexpr):
    half = tl.arange(0, D // 2)
    at = ptr + rows[:, None] * stride_row + half[None, :]
    tl.store(at, a.to(ptr.dtype.element_ty), mask=ok[:, None])
    tl.store(at + D // 2, b.to(ptr.dtype.element_ty), mask=ok[:, None])


@triton.jit
def _row_source(ptr, num_rows, stride, BLOCK: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr):
    """What ``_row_block`` reads the rows [num_rows, D] of one (batch, head) through: a tensor descriptor
    (TMA: no per-element address registers; rows past the end come back as zeros) or the pointer itself."""
    if TMA:
        return tl.make_tensor_descriptor(ptr, shape=[num_rows, D], strides=[stride, 1], block_shape=[BLOCK, D])
    else:
        return ptr


@triton.jit
def _row_block(src, start, num_rows, stride, BLOCK: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr):
    """Rows start .. start + BLOCK of a ``_row_source``, zeros past num_rows."""
    if TMA:
        return src.load([start, 0])
    else:
        rows = start + tl.arange(0, BLOCK)
        return tl.load(src + rows[:, None] * stride + tl.arange(0, D)[None, :], mask=rows[:, None] < num_rows,
                       other=0.0)


@triton.jit
def _normalize(x1, x2, rows, ok, eps, w_ptr, cos_ptr, sin_ptr, stride_cl, dtype, D: tl.constexpr,
               ROPE: tl.constexpr):
    """(x̂₁, x̂₂, rrms) of rows x = [x₁, x₂] (fp32 halves); cos_ptr/sin_ptr point at this sequence's rows."""
    rrms = tl.rsqrt((tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1)) / D + eps)
    half = tl.arange(0, D // 2)
    w1 = tl.load(w_ptr + half).to(tl.float32)
    w2 = tl.load(w_ptr + D // 2 + half).to(tl.float32)
    n1 = ((x1 * rrms[:, None]).to(dtype).to(tl.float32) * w1[None, :]).to(dtype).to(tl.float32)
    n2 = ((x2 * rrms[:, None]).to(dtype).to(tl.float32) * w2[None, :]).to(dtype).to(tl.float32)
    if ROPE:
        c1, c2 = _load_halves(cos_ptr, rows, ok, stride_cl, D)
        s1, s2 = _load_halves(sin_ptr, rows, ok, stride_cl, D)
        return (n1 * c1 - n2 * s1).to(dtype), (n2 * c2 + n1 * s2).to(dtype), rrms
    return n1.to(dtype), n2.to(dtype), rrms


@triton.jit
def _normalize_backward(dx_hat, x_ptr, stride_xl, rows, ok, rrms_ptr, w_ptr, cos_ptr, sin_ptr, stride_cl, dx_ptr,
                        stride_dxl, dw_partial_ptr, ROWS: tl.constexpr, D: tl.constexpr, ROPE: tl.constexpr):
    """The epilogue of a gradient kernel: from dx̂ [ROWS, D] fp32 the rope's and the RMSNorm's backward; stores
    dx and this program's dw partial (its rows summed)."""
    d1, d2 = _halves(dx_hat, ROWS, D)
    if ROPE:
        c1, c2 = _load_halves(cos_ptr, rows, ok, stride_cl, D)
        s1, s2 = _load_halves(sin_ptr, rows, ok, stride_cl, D)
        d1, d2 = d1 * c1 + d2 * s2, d2 * c2 - d1 * s1
    x1, x2 = _load_halves(x_ptr, rows, ok, stride_xl, D)
    rrms = tl.load(rrms_ptr + rows, mask=ok, other=0.0)
    half = tl.arange(0, D // 2)
    w1 = tl.load(w_ptr + half).to(tl.float32)
    w2 = tl.load(w_ptr + D // 2 + half).to(tl.float32)
    n1 = x1 * rrms[:, None]
    n2 = x2 * rrms[:, None]
    g1 = d1 * w1[None, :]
    g2 = d2 * w2[None, :]
    mean_gn = (tl.sum(g1 * n1, 1) + tl.sum(g2 * n2, 1)) / D
    _store_halves(dx_ptr, rows, ok, stride_dxl, rrms[:, None] * (g1 - n1 * mean_gn[:, None]),
                  rrms[:, None] * (g2 - n2 * mean_gn[:, None]), D)
    tl.store(dw_partial_ptr + half, tl.sum(d1 * n1, 0))
    tl.store(dw_partial_ptr + D // 2 + half, tl.sum(d2 * n2, 0))


@triton.jit
def _normalize_kernel(x_ptr, out_ptr, rrms_ptr, w_ptr, cos_ptr, sin_ptr, stride_xb, stride_xh, stride_xl,
                      stride_cb, stride_cl, L, eps, H: tl.constexpr, D: tl.constexpr, ROPE: tl.constexpr,
                      BLOCK_M: tl.constexpr):
    """x̂ [B, H, L, D] contiguous and rrms [B, H, L] of x: k before the attention (q too where it is recomputed)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ok = rows < L
    x1, x2 = _load_halves(x_ptr + b * stride_xb + (bh % H) * stride_xh, rows, ok, stride_xl, D)
    e1, e2, rrms = _normalize(x1, x2, rows, ok, eps, w_ptr, cos_ptr + b * stride_cb, sin_ptr + b * stride_cb,
                              stride_cl, out_ptr.dtype.element_ty, D, ROPE)
    _store_halves(out_ptr + bh * L * D, rows, ok, D, e1, e2, D)
    tl.store(rrms_ptr + bh * L + rows, rrms, mask=ok)


@triton.jit
def _attend(acc, m_i, l_i, q_hat, k_src, v_src, stride_vl, lo, hi, rows, S, qk_scale, D: tl.constexpr,
            BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, TMA: tl.constexpr):
    """The online softmax over the key blocks lo .. hi. MASK: the blocks that cross the causal diagonal or the
    end of the keys (masked scores get −1e6, not −inf: every row sees a key in its first block, so no row is all
    masked and no exp2(−inf + inf) can occur)."""
    for start in range(lo, hi, BLOCK_N):
        k = _row_block(k_src, start, S, D, BLOCK_N, D, TMA)
        s = tl.dot(q_hat, tl.trans(k))
        if MASK:
            keys = start + tl.arange(0, BLOCK_N)
            visible = keys[None, :] < S
            if CAUSAL:
                visible = visible & (keys[None, :] <= rows[:, None])
            s = s * qk_scale + tl.where(visible, 0.0, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            s = s - m_new[:, None]
        else:  # the scale folded into the subtraction (one FMA)
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            s = s * qk_scale - m_new[:, None]
        p = tl.math.exp2(s)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _row_block(v_src, start, S, stride_vl, BLOCK_N, D, TMA)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])  # accumulate in the dot's own registers
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _key_range(pid_m, S, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """(unmasked_end, end) of a query block's key blocks: before unmasked_end every key is visible to every row;
    causal: the blocks up to end cross the diagonal (top-left aligned, as SDPA's is_causal)."""
    if CAUSAL:
        return (tl.minimum(pid_m * BLOCK_M, S) // BLOCK_N) * BLOCK_N, tl.minimum((pid_m + 1) * BLOCK_M, S)
    else:
        return S, S


@triton.jit
def _forward_kernel(q_ptr, k_hat_ptr, v_ptr, out_ptr, q_hat_ptr, q_rrms_ptr, lse_ptr, w_ptr, cos_ptr, sin_ptr,
                    stride_qb, stride_qh, stride_ql, stride_vb, stride_vh, stride_vl,
                    stride_ob, stride_oh, stride_ol, stride_cb, stride_cl, L, S, eps, qk_scale,
                    HQ: tl.constexpr, G: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr, ROPE: tl.constexpr,
                    SAVE_Q_HAT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HQ
    h = bh % HQ
    bhk = b * (HQ // G) + h // G
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ok = rows < L
    dtype = out_ptr.dtype.element_ty
    x1, x2 = _load_halves(q_ptr + b * stride_qb + h * stride_qh, rows, ok, stride_ql, D)
    e1, e2, rrms = _normalize(x1, x2, rows, ok, eps, w_ptr, cos_ptr + b * stride_cb, sin_ptr + b * stride_cb,
                              stride_cl, dtype, D, ROPE)
    tl.store(q_rrms_ptr + bh * L + rows, rrms, mask=ok)
    if SAVE_Q_HAT:
        _store_halves(q_hat_ptr + bh * L * D, rows, ok, D, e1, e2, D)
    q_hat = _whole(e1, e2, BLOCK_M, D)

    k_src = _row_source(k_hat_ptr + bhk * S * D, S, D, BLOCK_N, D, TMA)
    v_src = _row_source(v_ptr + b * stride_vb + (h // G) * stride_vh, S, stride_vl, BLOCK_N, D, TMA)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    unmasked_end, end = _key_range(pid_m, S, BLOCK_M, BLOCK_N, CAUSAL)
    unmasked_end = (unmasked_end // BLOCK_N) * BLOCK_N  # the forward also masks the partial last block
    acc, m_i, l_i = _attend(acc, m_i, l_i, q_hat, k_src, v_src, stride_vl, 0, unmasked_end, rows, S, qk_scale,
                            D, BLOCK_N, False, CAUSAL, TMA)
    acc, m_i, l_i = _attend(acc, m_i, l_i, q_hat, k_src, v_src, stride_vl, unmasked_end, end, rows, S, qk_scale,
                            D, BLOCK_N, True, CAUSAL, TMA)
    cols = tl.arange(0, D)
    out = out_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_ol + cols[None, :]
    tl.store(out, (acc / l_i[:, None]).to(dtype), mask=ok[:, None])
    tl.store(lse_ptr + bh * L + rows, m_i + tl.math.log2(l_i), mask=ok)


@triton.jit
def _delta_kernel(out_ptr, dout_ptr, delta_ptr, stride_ob, stride_oh, stride_ol, stride_db, stride_dh, stride_dl,
                  L, H: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr):
    """Δ = rowsum(out · dout) [B, H, L]."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    ok = rows[:, None] < L
    o = tl.load(out_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_ol + cols[None, :], mask=ok,
                other=0.0)
    do = tl.load(dout_ptr + b * stride_db + h * stride_dh + rows[:, None] * stride_dl + cols[None, :], mask=ok,
                 other=0.0)
    tl.store(delta_ptr + bh * L + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1), mask=rows < L)


@triton.jit
def _dkdv_steps(dk, dv, k_hat, v, keys, q_src, dout_src, stride_dl, lse_ptr, delta_ptr, lo, hi, L, qk_scale,
                D: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr, TMA: tl.constexpr):
    """dK, dV of one key block, summed over the query blocks lo .. hi of one head. Rows past L load as zeros
    (dout = 0), so they add nothing; MASK: the blocks that cross the causal diagonal."""
    for start in range(lo, hi, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        ok = rows < L
        q_hat = _row_block(q_src, start, L, D, BLOCK_M, D, TMA)
        do = _row_block(dout_src, start, L, stride_dl, BLOCK_M, D, TMA)
        lse = tl.load(lse_ptr + rows, mask=ok, other=0.0)
        delta = tl.load(delta_ptr + rows, mask=ok, other=0.0)
        p_t = tl.math.exp2(tl.dot(k_hat, tl.trans(q_hat)) * qk_scale - lse[None, :])
        if MASK:
            p_t = tl.where(rows[None, :] >= keys[:, None], p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        ds_t = p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])
        dk = tl.dot(ds_t.to(q_hat.dtype), q_hat, dk)
    return dk, dv


@triton.jit
def _dkdv_kernel(q_hat_ptr, k_ptr, k_hat_ptr, v_ptr, dout_ptr, lse_ptr, delta_ptr, k_rrms_ptr, w_ptr, cos_ptr,
                 sin_ptr, dk_ptr, dv_ptr, dw_ptr,
                 stride_kb, stride_kh, stride_kl, stride_vb, stride_vh, stride_vl, stride_db, stride_dh, stride_dl,
                 stride_dkb, stride_dkh, stride_dkl, stride_dvb, stride_dvh, stride_dvl, stride_cb, stride_cl,
                 L, S, qk_scale, scale,
                 HK: tl.constexpr, G: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr, ROPE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr):
    pid_n = tl.program_id(0)
    bhk = tl.program_id(1)
    b = bhk // HK
    hk = bhk % HK
    keys = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = keys < S
    cols = tl.arange(0, D)
    k_hat = _row_block(k_hat_ptr + bhk * S * D, pid_n * BLOCK_N, S, D, BLOCK_N, D, False)
    v = _row_block(v_ptr + b * stride_vb + hk * stride_vh, pid_n * BLOCK_N, S, stride_vl, BLOCK_N, D, False)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    if CAUSAL:  # query blocks that reach the diagonal of this key block are masked, the later ones are not
        lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M
        masked_end = tl.minimum(tl.cdiv((pid_n + 1) * BLOCK_N, BLOCK_M) * BLOCK_M, L)
    else:
        lo = 0
        masked_end = 0
    for g in range(G):
        bh = b * HK * G + hk * G + g
        q_src = _row_source(q_hat_ptr + bh * L * D, L, D, BLOCK_M, D, TMA)
        dout_src = _row_source(dout_ptr + b * stride_db + (hk * G + g) * stride_dh, L, stride_dl, BLOCK_M, D, TMA)
        if CAUSAL:
            dk, dv = _dkdv_steps(dk, dv, k_hat, v, keys, q_src, dout_src, stride_dl, lse_ptr + bh * L,
                                 delta_ptr + bh * L, lo, masked_end, L, qk_scale, D, BLOCK_M, True, TMA)
        dk, dv = _dkdv_steps(dk, dv, k_hat, v, keys, q_src, dout_src, stride_dl, lse_ptr + bh * L,
                             delta_ptr + bh * L, masked_end, L, L, qk_scale, D, BLOCK_M, False, TMA)
    dv_at = dv_ptr + b * stride_dvb + hk * stride_dvh + keys[:, None] * stride_dvl + cols[None, :]
    tl.store(dv_at, dv.to(dv_ptr.dtype.element_ty), mask=ok[:, None])
    _normalize_backward(dk * scale, k_ptr + b * stride_kb + hk * stride_kh, stride_kl, keys, ok,
                        k_rrms_ptr + bhk * S, w_ptr, cos_ptr + b * stride_cb, sin_ptr + b * stride_cb, stride_cl,
                        dk_ptr + b * stride_dkb + hk * stride_dkh, stride_dkl,
                        dw_ptr + (bhk * tl.num_programs(0) + pid_n) * D, BLOCK_N, D, ROPE)


@triton.jit
def _dq_steps(dq, q_hat, do, lse, delta, rows, k_src, v_src, stride_vl, lo, hi, S, qk_scale, D: tl.constexpr,
              BLOCK_N: tl.constexpr, MASK: tl.constexpr, TMA: tl.constexpr):
    """dq̂ of one query block over the key blocks lo .. hi. Keys past S load as zeros: their dS multiplies k̂ = 0.
    MASK: the blocks that cross the causal diagonal."""
    for start in range(lo, hi, BLOCK_N):
        k = _row_block(k_src, start, S, D, BLOCK_N, D, TMA)
        v = _row_block(v_src, start, S, stride_vl, BLOCK_N, D, TMA)
        p = tl.math.exp2(tl.dot(q_hat, tl.trans(k)) * qk_scale - lse[:, None])
        if MASK:
            keys = start + tl.arange(0, BLOCK_N)
            p = tl.where(keys[None, :] <= rows[:, None], p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit
def _dq_kernel(q_ptr, q_hat_ptr, k_hat_ptr, v_ptr, dout_ptr, lse_ptr, delta_ptr, q_rrms_ptr, w_ptr, cos_ptr, sin_ptr,
               dq_ptr, dw_ptr, stride_qb, stride_qh, stride_ql, stride_vb, stride_vh, stride_vl,
               stride_db, stride_dh, stride_dl, stride_dqb, stride_dqh, stride_dql, stride_cb, stride_cl,
               L, S, qk_scale, scale,
               HQ: tl.constexpr, G: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr, ROPE: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HQ
    h = bh % HQ
    bhk = b * (HQ // G) + h // G
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ok = rows < L
    q_hat = _row_block(q_hat_ptr + bh * L * D, pid_m * BLOCK_M, L, D, BLOCK_M, D, False)
    do = _row_block(dout_ptr + b * stride_db + h * stride_dh, pid_m * BLOCK_M, L, stride_dl, BLOCK_M, D, False)
    lse = tl.load(lse_ptr + bh * L + rows, mask=ok, other=0.0)
    delta = tl.load(delta_ptr + bh * L + rows, mask=ok, other=0.0)
    k_src = _row_source(k_hat_ptr + bhk * S * D, S, D, BLOCK_N, D, TMA)
    v_src = _row_source(v_ptr + b * stride_vb + (h // G) * stride_vh, S, stride_vl, BLOCK_N, D, TMA)
    unmasked_end, end = _key_range(pid_m, S, BLOCK_M, BLOCK_N, CAUSAL)
    dq = tl.zeros([BLOCK_M, D], tl.float32)
    dq = _dq_steps(dq, q_hat, do, lse, delta, rows, k_src, v_src, stride_vl, 0, unmasked_end, S, qk_scale, D,
                   BLOCK_N, False, TMA)
    dq = _dq_steps(dq, q_hat, do, lse, delta, rows, k_src, v_src, stride_vl, unmasked_end, end, S, qk_scale, D,
                   BLOCK_N, True, TMA)
    _normalize_backward(dq * scale, q_ptr + b * stride_qb + h * stride_qh, stride_ql, rows, ok,
                        q_rrms_ptr + bh * L, w_ptr, cos_ptr + b * stride_cb, sin_ptr + b * stride_cb, stride_cl,
                        dq_ptr + b * stride_dqb + h * stride_dqh, stride_dql,
                        dw_ptr + (bh * tl.num_programs(0) + pid_m) * D, BLOCK_M, D, ROPE)


def unsupported_reason(q: Tensor, k: Tensor, v: Tensor, rope: bool) -> Optional[str]:
    """None when the kernels take these operands (q [B, Hq, L, D], k, v [B, Hk, S, D])."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "q, k, v are not 4-D [B, H, L, D]"
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtypes q {q.dtype}, k {k.dtype}, v {v.dtype} (fp16/bf16/fp32, all alike)"
    if q.dtype == torch.float32 and q.is_cuda and not torch.backends.cuda.matmul.allow_tf32:
        return "fp32 on the GPU: the kernels' dots would round to TF32 (torch.backends.cuda.matmul.allow_tf32 is off)"
    B, HQ, L, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D or HQ % k.shape[1]:
        return f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} (GQA needs Hq % Hk == 0)"
    if D not in (16, 32, 64, 128):
        return f"head_dim {D} (16, 32, 64, 128)"
    if L == 0 or k.shape[2] == 0:
        return "an empty sequence"
    if rope and k.shape[2] != L:
        return "rotary embedding with different query and key lengths (the positions are shared)"
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        return "a head dimension is strided"
    return None


# (BLOCK_M, BLOCK_N, num_warps, num_stages) per kernel on the GPU. Measured on the H200 at batch 4, seq 4096,
# 32/8 heads, D 128, causal (benchmarks/results/gpu-2026-11-30b/qk_configs.log, qk_norm_tuned.log): forward
# 128×128 with 8 warps (1.29 ms; 128×64: 1.40), dq and dK/dV 64×64 with 4 warps.
GPU_CONFIGS = {"forward": (128, 128, 8, 3), "dq": (64, 64, 4, 2), "dkdv": (64, 64, 4, 2)}


def default_config(head_dim: int, kernel: str, on_cpu: bool = False) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of ``kernel``. On the CPU (interpreter) small blocks keep the
    tests fast."""
    return (16, 16, 1, 1) if on_cpu else GPU_CONFIGS[kernel]


def _launch(config, tma: bool):
    block_m, block_n, warps, stages = config
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages, TMA=tma)




def _use_tma(tma: Optional[bool], tensors: list, which: str) -> bool:
    """Descriptors need 16-byte aligned bases, row strides and (batch, head) offsets, and unit stride along D."""
    def aligned(t):
        return (t.data_ptr() % 16 == 0 and t.stride(-1) == 1
                and all((st * t.element_size()) % 16 == 0 for st in t.stride()[:-1]))

    ok = all(aligned(t) for t in tensors)
    if tma is None:
        tma = getattr(tuning.current(), f"qk_attention_tma_{which}") and ok
    elif tma and not ok:
        raise ValueError("tma=True, but an operand is not 16-byte aligned")
    if tma and tensors[0].is_cuda:
        from .norm_gemm import _ensure_allocator

        _ensure_allocator()
    return tma


def _rope_args(cos: Optional[Tensor], sin: Optional[Tensor], like: Tensor):
    """(cos, sin, stride_b, stride_l): [B|1, L, D] tables, batch stride 0 when shared."""
    if cos is None:
        return like, like, 0, 0
    if cos.stride() != sin.stride() or cos.stride(-1) != 1:
        cos, sin = cos.contiguous(), sin.contiguous()
    return cos, sin, (cos.stride(0) if cos.shape[0] > 1 else 0), cos.stride(1)


def normalize(x: Tensor, weight: Tensor, eps: float, cos: Optional[Tensor], sin: Optional[Tensor]
              ) -> tuple[Tensor, Tensor]:
    """(x̂ [B, H, L, D] contiguous, rrms [B, H, L] fp32) of x [B, H, L, D]."""
    B, H, L, D = x.shape
    out = torch.empty(B, H, L, D, device=x.device, dtype=x.dtype)
    rrms = torch.empty(B, H, L, device=x.device, dtype=torch.float32)
    rope = cos is not None
    cos, sin, stride_cb, stride_cl = _rope_args(cos, sin, x)
    block = 16 if not x.is_cuda else 64
    _normalize_kernel[(triton.cdiv(L, block), B * H)](
        x, out, rrms, weight, cos, sin, x.stride(0), x.stride(1), x.stride(2), stride_cb, stride_cl, L, eps,
        H=H, D=D, ROPE=rope, BLOCK_M=block, num_warps=4)
    return out, rrms


def forward(q: Tensor, k: Tensor, v: Tensor, q_weight: Tensor, k_weight: Tensor, cos: Optional[Tensor],
            sin: Optional[Tensor], q_eps: float, k_eps: float, scale: float, causal: bool, save_q_hat: bool,
            config=None, tma: Optional[bool] = None):
    """(out [B, Hq, L, D] (memory [B, L, Hq, D]), lse [B, Hq, L] (base 2, scaled), q_rrms, k_rrms, q̂ (or empty),
    k̂). ``config``: (BLOCK_M, BLOCK_N, num_warps, num_stages) of the attention kernel; ``tma``: KV blocks
    through tensor descriptors (None: tuning's qk_attention_tma_* where the operands allow)."""
    B, HQ, L, D = q.shape
    HK, S = k.shape[1], k.shape[2]
    k_hat, k_rrms = normalize(k, k_weight, k_eps, cos, sin)
    out = torch.empty(B, L, HQ, D, device=q.device, dtype=q.dtype).transpose(1, 2)
    q_hat = torch.empty((B, HQ, L, D) if save_q_hat else (0,), device=q.device, dtype=q.dtype)
    q_rrms, lse = (torch.empty(B, HQ, L, device=q.device, dtype=torch.float32) for _ in range(2))
    cos_t, sin_t, stride_cb, stride_cl = _rope_args(cos, sin, q)
    config = config or default_config(D, "forward", not q.is_cuda)
    tma = _use_tma(tma, [k_hat, v], "forward")
    _forward_kernel[(triton.cdiv(L, config[0]), B * HQ)](
        q, k_hat, v, out, q_hat, q_rrms, lse, q_weight, cos_t, sin_t, *q.stride()[:3], *v.stride()[:3],
        *out.stride()[:3], stride_cb, stride_cl, L, S, q_eps, scale * LOG2E,
        HQ=HQ, G=HQ // HK, D=D, CAUSAL=causal, ROPE=cos is not None, SAVE_Q_HAT=save_q_hat,
        **_launch(config, tma))
    return out, lse, q_rrms, k_rrms, q_hat, k_hat


def backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, q_weight: Tensor, k_weight: Tensor,
             cos: Optional[Tensor], sin: Optional[Tensor], q_eps: float, scale: float, causal: bool, out: Tensor,
             lse: Tensor, q_rrms: Tensor, k_rrms: Tensor, q_hat: Tensor, k_hat: Tensor, dq_config=None,
             dkdv_config=None, tma: Optional[bool] = None):
    """(dq, dk, dv, dw_q, dw_k). q̂ is recomputed when the forward did not store it (empty)."""
    B, HQ, L, D = q.shape
    HK, S = k.shape[1], k.shape[2]
    if q_hat.numel() == 0:
        q_hat = normalize(q, q_weight, q_eps, cos, sin)[0]
    on_cpu = not q.is_cuda
    dq_config = dq_config or default_config(D, "dq", on_cpu)
    dkdv_config = dkdv_config or default_config(D, "dkdv", on_cpu)
    delta = torch.empty(B, HQ, L, device=q.device, dtype=torch.float32)
    block = 16 if on_cpu else 64
    _delta_kernel[(triton.cdiv(L, block), B * HQ)](out, grad_out, delta, *out.stride()[:3], *grad_out.stride()[:3],
                                                   L, H=HQ, D=D, BLOCK_M=block, num_warps=4)
    # gradients in the memory order of the model's projections ([B, L, H, D]), seen as [B, H, L, D]
    dq, dk, dv = (torch.empty(B, t.shape[2], t.shape[1], D, device=q.device, dtype=q.dtype).transpose(1, 2)
                  for t in (q, k, v))
    cos_t, sin_t, stride_cb, stride_cl = _rope_args(cos, sin, q)
    flags = dict(G=HQ // HK, D=D, CAUSAL=causal, ROPE=cos is not None)
    m_blocks, n_blocks = triton.cdiv(L, dq_config[0]), triton.cdiv(S, dkdv_config[1])
    dw_q = torch.empty(B * HQ * m_blocks, D, device=q.device, dtype=torch.float32)
    dw_k = torch.empty(B * HK * n_blocks, D, device=q.device, dtype=torch.float32)
    qk_scale = scale * LOG2E
    tma = _use_tma(tma, [q_hat, k_hat, v, grad_out], "backward")
    _dkdv_kernel[(n_blocks, B * HK)](
        q_hat, k, k_hat, v, grad_out, lse, delta, k_rrms, k_weight, cos_t, sin_t, dk, dv, dw_k,
        *k.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3], *dk.stride()[:3], *dv.stride()[:3],
        stride_cb, stride_cl, L, S, qk_scale, scale, HK=HK, **flags, **_launch(dkdv_config, tma))
    _dq_kernel[(m_blocks, B * HQ)](
        q, q_hat, k_hat, v, grad_out, lse, delta, q_rrms, q_weight, cos_t, sin_t, dq, dw_q,
        *q.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3], *dq.stride()[:3], stride_cb, stride_cl,
        L, S, qk_scale, scale, HQ=HQ, **flags, **_launch(dq_config, tma))
    return dq, dk, dv, dw_q.sum(0).to(q_weight.dtype), dw_k.sum(0).to(k_weight.dtype)
