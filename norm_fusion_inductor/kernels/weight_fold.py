"""A consumer GEMM's weight-side operands in one pass over its weight (regrouped normalization, docs/design.md §4).

For a linear z = LN(x) Wᵀ + b with W [N, K] (or [K, N], ``w_kn``), γ and β [K] (fp32), the consumer's epilogue
needs, per output column n:

    W'[n, k] = round(W[n, k] · γ[k])           the weight the GEMM multiplies with, in W's dtype
    u[n]     = Σ_k W'[n, k]                    fp32, summed from the *rounded* W' (LayerNorm's mean correction:
                                               rstd·μ·u then cancels the GEMM's μ term to fp32 accumulation error)
    v[n]     = Σ_k W[n, k] · β[k] + b[n]       fp32 (β pushed through the linear)

Each program owns ``BLOCK_N`` columns n and walks K, reading W once and writing W' once; u and v need no second
pass and no cross-program exchange. The outputs are written through their own strides and offsets, so a gated
pair's gate and up halves land interleaved (rows 2n and 2n+1, or columns for [K, N]) in one buffer.

Launched directly while a pass traces it (``wrap_triton``): no Python op per step, where Inductor would elide the
16-bit rounding between the product and the sum if it fused them itself.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import launcher, num_sms, unused_pointer

# a program's tile, in elements: K-long rows of 16-bit weights read 16 KB per step
TILE_ELEMENTS = 8192
# [K, N] weights: each row of a tile is BLOCK_N columns that lie next to each other; under 16 of them a 16-bit
# tile reads partial 32-byte sectors
MIN_BLOCK_N_KN = 16
MAX_BLOCK_N = 64


@triton.jit
def weight_fold_kernel(w_ptr, gamma_ptr, beta_ptr, bias_ptr, w_out_ptr, u_ptr, v_ptr,
                       N, K, stride_wn, stride_wk, stride_on, stride_ok, out_offset, stride_uv, uv_offset,
                       HAS_GAMMA: tl.constexpr, HAS_BETA: tl.constexpr, HAS_BIAS: tl.constexpr,
                       WRITE_W: tl.constexpr, WRITE_U: tl.constexpr, WRITE_V: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    u = tl.zeros([BLOCK_N], dtype=tl.float32)
    v = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        mask = n_mask[:, None] & k_mask[None, :]
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :] * stride_wk, mask=mask, other=0.0)
        folded = w
        if HAS_GAMMA:
            gamma = tl.load(gamma_ptr + offs_k, mask=k_mask, other=0.0)
            folded = (w.to(tl.float32) * gamma[None, :]).to(w_ptr.dtype.element_ty)
        if WRITE_W:
            tl.store(w_out_ptr + out_offset + offs_n[:, None] * stride_on + offs_k[None, :] * stride_ok, folded,
                     mask=mask)
        if WRITE_U:
            u += tl.sum(folded.to(tl.float32), axis=1)
        if HAS_BETA:
            beta = tl.load(beta_ptr + offs_k, mask=k_mask, other=0.0)
            v += tl.sum(w.to(tl.float32) * beta[None, :], axis=1)
    if WRITE_U:
        tl.store(u_ptr + uv_offset + offs_n * stride_uv, u, mask=n_mask)
    if WRITE_V:
        if HAS_BIAS:
            v += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        tl.store(v_ptr + uv_offset + offs_n * stride_uv, v, mask=n_mask)


def block_sizes(N: int, K: int, w_kn: bool, device: torch.device) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_K): as few columns per program as keep two programs per SM busy (a weight pass is
    memory-bound: the grid, not the tile, sets its bandwidth), at least ``MIN_BLOCK_N_KN`` for [K, N] weights."""
    programs_wanted = 2 * (num_sms(device.index or 0) if device.type == "cuda" else 4)
    block_n = MAX_BLOCK_N
    floor = MIN_BLOCK_N_KN if w_kn else 1
    while block_n > floor and triton.cdiv(N, block_n) < programs_wanted:
        block_n //= 2
    block_k = max(16, min(triton.next_power_of_2(K), TILE_ELEMENTS // block_n))
    return block_n, block_k


def fold(w: torch.Tensor, gamma: torch.Tensor | None, beta: torch.Tensor | None, bias: torch.Tensor | None,
         w_kn: bool, *, w_out: torch.Tensor | None, u: torch.Tensor | None, v: torch.Tensor | None,
         out_offset: int = 0, uv_offset: int = 0, out_step: int = 1) -> None:
    """One launch: W' = W·γ into ``w_out`` (None: not written), u = Σ_k W' into ``u``, v = Wβ + b into ``v``
    (either None: not computed). ``out_step``, ``out_offset`` and ``uv_offset`` place the outputs of one half of
    a gated pair: every ``out_step``-th row of W' (column, for [K, N]) and element of u and v from that offset.
    γ and β are fp32 [K]; W' is laid out like a contiguous W with N ``out_step`` times as large."""
    K, N = (w.shape[0], w.shape[1]) if w_kn else (w.shape[1], w.shape[0])
    stride_wn, stride_wk = (w.stride(1), w.stride(0)) if w_kn else (w.stride(0), w.stride(1))
    stride_on, stride_ok = (out_step, out_step * N) if w_kn else (out_step * K, 1)
    block_n, block_k = block_sizes(N, K, w_kn, w.device)
    dummy = unused_pointer(w)
    launcher(weight_fold_kernel, w)[(triton.cdiv(N, block_n),)](
        w, *(t if t is not None else dummy for t in (gamma, beta, bias, w_out, u, v)),
        N, K, stride_wn, stride_wk, stride_on, stride_ok, out_offset, out_step, uv_offset,
        HAS_GAMMA=gamma is not None, HAS_BETA=beta is not None, HAS_BIAS=bias is not None,
        WRITE_W=w_out is not None, WRITE_U=u is not None, WRITE_V=v is not None,
        BLOCK_N=block_n, BLOCK_K=block_k)
