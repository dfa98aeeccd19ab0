"""What the norm-GEMM kernels (``norm_gemm``, ``norm_gemm_gluon``) share: the row-statistics pre-pass and the
shape limits of their prologues and of the post-norm epilogue."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import launcher, unused_pointer

POST_NORM_MAX_N = 256  # whole rows in one tile: TMA's largest box


@triton.jit
def row_stats_kernel(x_ptr, mean_ptr, rstd_ptr, M, K, stride_xm, inv_k, eps, CENTER: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """The pre-pass, one read of x: rstd[m] = rsqrt(mean(x²) + eps) (RMSNorm), or with CENTER mean[m] and
    rstd[m] = rsqrt(var + eps) (LayerNorm, from sums of x − x[m, 0], which do not cancel)."""
    inv_k, eps = tl.cast(inv_k, tl.float32), tl.cast(eps, tl.float32)  # fp64 when Inductor launches it
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    if CENTER:
        shift = tl.load(x_ptr + rows * stride_xm, mask=rows < M, other=0.0).to(tl.float32)
        sum_x = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    sum_sq = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        cols = k + tl.arange(0, BLOCK_K)
        mask = (rows[:, None] < M) & (cols[None, :] < K)
        v = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if CENTER:
            v = tl.where(mask, v - shift[:, None], 0.0)
            sum_x += v
        sum_sq += v * v
    if CENTER:
        mean_shifted = tl.sum(sum_x, axis=1) * inv_k
        var = tl.sum(sum_sq, axis=1) * inv_k - mean_shifted * mean_shifted
        tl.store(mean_ptr + rows, shift + mean_shifted, mask=rows < M)
        tl.store(rstd_ptr + rows, tl.math.rsqrt(tl.maximum(var, 0.0) + eps), mask=rows < M)
    else:
        tl.store(rstd_ptr + rows, tl.math.rsqrt(tl.sum(sum_sq, axis=1) * inv_k + eps), mask=rows < M)


def row_stats(x, rstd, mean, eps):
    """rstd (and with ``mean`` the mean) [M] fp32 of x's rows by row_stats_kernel."""
    M, K = x.shape
    block_k = min(triton.next_power_of_2(K), 1024 if x.is_cuda else 32)
    block_m = 8 if x.is_cuda else 4
    launcher(row_stats_kernel, x)[(triton.cdiv(M, block_m),)](
        x, mean if mean is not None else unused_pointer(x), rstd, M, K, x.stride(0), 1.0 / K, eps,
        CENTER=mean is not None, BLOCK_M=block_m, BLOCK_K=block_k, num_warps=8 if x.is_cuda else 1)


def unsupported_shape_reason(dtype: torch.dtype, K: int, N: int, device: torch.device,
                             center: bool = False) -> str | None:
    """What the kernel cannot take whatever the tensors' layout (the pass checks this at compile time).
    ``center``: LayerNorm."""
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {dtype} not supported"
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] < 9:
        return "tensor descriptors need sm_90 or newer"
    if center and device.type == "cuda" and dtype == torch.float32:
        # the pre-pass loses accuracy at |mean| >> std in fp32 (norm_gemm's module doc); the in-loop plan, which
        # does not, has not run in fp32 on the GPU
        return "fp32 LayerNorm has no GPU kernel plan within the unfused path's error"
    elem = torch.empty((), dtype=dtype).element_size()
    if (K * elem) % 16 or (N * elem) % 16:
        return f"K={K} or N={N} rows are not 16-byte aligned (TMA)"
    return None


def post_norm_unsupported_reason(dtype, K: int, N: int, M: int, device: torch.device) -> str | None:
    """What the post-norm epilogue cannot take on top of the mainloop's limits (unsupported_shape_reason)."""
    if N > POST_NORM_MAX_N:
        return (f"N={N} > {POST_NORM_MAX_N}: the post-norm epilogue needs whole rows in one tile (the regrouped "
                f"rewrite, fusions 'regrouped_norm', takes wider rows)")
    if M * N >= 2 ** 31:
        return f"M*N = {M * N} overflows the epilogue's 32-bit offsets"
    return unsupported_shape_reason(dtype, K, N, device)
