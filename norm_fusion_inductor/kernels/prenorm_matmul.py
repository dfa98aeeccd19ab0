"""Lazy Pre-Norm: RMSNorm fused into a persistent TMA GEMM.

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

The GEMM is Triton's persistent tensor-descriptor matmul: a grid of at most NUM_SMS programs, each walking
output tiles in grouped (GROUP_M) order so consecutive tiles share A/B in L2. With ROW_STATS=False and
HAS_GAMMA=False it is a plain GEMM, which the benchmark uses to measure the cost of the prologue.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl


@triton.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M row blocks advance together along N so their A tiles stay in L2."""
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def prenorm_gemm_kernel(
    x_ptr, w_ptr, out_ptr, gamma_ptr, bias_ptr, rstd_ptr,
    M, N, K, inv_k, eps,
    stride_xm, stride_wn, stride_om,
    ROW_STATS: tl.constexpr,  # accumulate Σx² and scale rows by rstd (RMSNorm prologue)
    ROW_SCALE: tl.constexpr,  # scale rows by rstd read from rstd_ptr (computed by the pre-pass)
    HAS_GAMMA: tl.constexpr,  # scale the A tile's columns by γ
    HAS_BIAS: tl.constexpr,
    WRITE_RSTD: tl.constexpr,
    DOT_PRECISION: tl.constexpr,  # "tf32" / "ieee" for fp32 inputs; ignored for 16-bit ones
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr,
):
    dtype = out_ptr.dtype.element_ty
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1], block_shape=[BLOCK_N, BLOCK_K])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[stride_om, 1],
                                       block_shape=[BLOCK_M, BLOCK_N])

    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n

    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        # x² is summed elementwise into a register tile and reduced across the tile once after the loop:
        # a row reduction per K step would put warp shuffles on the mainloop's critical path.
        sum_sq = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = x_desc.load([off_m, off_k])  # out-of-bounds rows/columns read as 0: harmless for Σx² and the dot
            b = w_desc.load([off_n, off_k])
            if ROW_STATS or HAS_GAMMA:
                a32 = a.to(tl.float32)
                if ROW_STATS:
                    sum_sq += a32 * a32
                if HAS_GAMMA:
                    offs_k = off_k + tl.arange(0, BLOCK_K)
                    g = tl.load(gamma_ptr + offs_k, mask=offs_k < K, other=0.0).to(tl.float32)
                    a = (a32 * g[None, :]).to(a.dtype)
            acc = tl.dot(a, b.T, acc, input_precision=DOT_PRECISION)

        if ROW_STATS:
            rstd = tl.math.rsqrt(tl.sum(sum_sq, axis=1) * inv_k + eps)
            acc = acc * rstd[:, None]
            if WRITE_RSTD:
                if pid_n == 0:
                    offs_m = off_m + tl.arange(0, BLOCK_M)
                    tl.store(rstd_ptr + offs_m, rstd, mask=offs_m < M)
        if ROW_SCALE:
            offs_m = off_m + tl.arange(0, BLOCK_M)
            acc = acc * tl.load(rstd_ptr + offs_m, mask=offs_m < M, other=0.0)[:, None]
        if HAS_BIAS:
            offs_n = off_n + tl.arange(0, BLOCK_N)
            bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
            acc = acc + bias[None, :]
        o_desc.store([off_m, off_n], acc.to(dtype))


@triton.jit
def row_rstd_kernel(x_ptr, rstd_ptr, M, K, stride_xm, inv_k, eps, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """rstd[m] = rsqrt(mean(x[m, :]²) + eps): the pre-pass, one read of x."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    sum_sq = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        cols = k + tl.arange(0, BLOCK_K)
        mask = (rows[:, None] < M) & (cols[None, :] < K)
        v = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        sum_sq += v * v
    tl.store(rstd_ptr + rows, tl.math.rsqrt(tl.sum(sum_sq, axis=1) * inv_k + eps), mask=rows < M)


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
# the row-statistics variant on sm_90 (NVGPUWarpSpecialization, 2026-11-29), see NOTES.md.
# Small blocks for the CPU interpreter: it runs one program at a time in numpy.
_INTERPRETER_CONFIG = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_stages=1, num_warps=1,
                           WARP_SPECIALIZE=False, FLATTEN=False)


def _env_interpret() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _ensure_allocator() -> None:
    """Device-side tensor descriptors need a small global scratch buffer from Triton's allocator."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        def alloc(size: int, alignment: int, stream):
            return torch.empty(size, device="cuda", dtype=torch.int8)

        triton.set_allocator(alloc)


def _bucket(m: int) -> int:
    """Autotuning key for M: one tuning per power of two, so varying batch sizes do not retune every call."""
    return 1 << max(m - 1, 0).bit_length()


_TUNED: dict = {}


def _launch(x, w, out, gamma, bias, rstd, eps, cfg, row_stats=False, row_scale=False):
    M, K = x.shape
    N = w.shape[0]
    if x.is_cuda:
        num_sms = _num_sms(x.device.index or 0)
        _ensure_allocator()
    else:
        num_sms = 4
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    grid = (min(num_sms, tiles),)
    dot_precision = "ieee"
    if x.dtype == torch.float32 and x.is_cuda and torch.backends.cuda.matmul.allow_tf32:
        dot_precision = "tf32"
    dummy = out  # never read: the flags that would read it are off
    prenorm_gemm_kernel[grid](
        x, w, out,
        gamma if gamma is not None else dummy,
        bias if bias is not None else dummy,
        rstd if rstd is not None else dummy,
        M, N, K, 1.0 / K, eps,
        x.stride(0), w.stride(0), out.stride(0),
        ROW_STATS=row_stats, ROW_SCALE=row_scale, HAS_GAMMA=gamma is not None, HAS_BIAS=bias is not None,
        WRITE_RSTD=row_stats and rstd is not None, DOT_PRECISION=dot_precision, NUM_SMS=num_sms,
        **cfg,
    )


def _row_rstd(x, rstd, eps):
    M, K = x.shape
    block_k = min(triton.next_power_of_2(K), 1024 if x.is_cuda else 32)
    block_m = 8 if x.is_cuda else 4
    row_rstd_kernel[(triton.cdiv(M, block_m),)](x, rstd, M, K, x.stride(0), 1.0 / K, eps, BLOCK_M=block_m,
                                               BLOCK_K=block_k, num_warps=8 if x.is_cuda else 1)


def _run(plan, x, gamma, w, bias, eps, out, rstd):
    """Run one plan: ("in_loop" | "pre_pass" | "plain", block config)."""
    prologue, cfg = plan
    if prologue == "in_loop":
        if gamma is None:
            # The x tile must reach the tensor cores through registers (where Σx² reads it): fed straight from
            # shared memory next to the register read, Triton 3.6 miscompiled it on sm_90 (errors ~0.2 in
            # bf16/fp16, 2026-11-29). A γ of ones takes the register path.
            gamma = torch.ones(x.shape[1], device=x.device, dtype=x.dtype)
        _launch(x, w, out, gamma, bias, rstd, eps, cfg, row_stats=True)
    elif prologue == "pre_pass":
        _row_rstd(x, rstd, eps)
        w_eff = _fold(w, gamma)  # γ folded into the weight: A goes straight to the wgmma
        _launch(x, w_eff, out, None, bias, rstd, eps, cfg, row_scale=True)
    else:  # "plain": the bare GEMM (x·γ folded the same way), to measure what the prologues cost
        _launch(x, _fold(w, gamma), out, None, bias, None, eps, cfg)


def _fold(w, gamma):
    """W · diag(γ) in W's dtype (γ may be fp32, e.g. Gemma's 1 + w)."""
    return (w * gamma).to(w.dtype) if gamma is not None else w


def supports(x: torch.Tensor, w: torch.Tensor) -> str | None:
    """None if the kernel can run these operands, else the reason it cannot (logged by the caller)."""
    if x.dim() != 2 or w.dim() != 2:
        return "kernel takes 2-D operands"
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {x.dtype} not supported"
    if w.dtype != x.dtype:
        return f"weight dtype {w.dtype} differs from input dtype {x.dtype}"
    if x.device.type != "cuda" and not _env_interpret():
        return f"no Triton kernel for device {x.device.type}"
    if x.device.type == "cuda" and torch.cuda.get_device_capability(x.device)[0] < 9:
        return "tensor descriptors need sm_90 or newer"
    elem = x.element_size()
    for name, t in (("input", x), ("weight", w)):
        if t.stride(-1) != 1:
            return f"{name} is not contiguous in its last dim"
        if (t.stride(0) * elem) % 16 or t.data_ptr() % 16:
            return f"{name} rows are not 16-byte aligned (TMA)"
    if (w.shape[0] * elem) % 16:
        return "output rows are not 16-byte aligned (TMA)"
    return None


PROLOGUES = ("in_loop", "pre_pass")


def _candidate_plans(x: torch.Tensor) -> list[tuple]:
    if not x.is_cuda:
        return [(prologue, _INTERPRETER_CONFIG) for prologue in PROLOGUES]
    configs = _GPU_CONFIGS
    if x.dtype == torch.float32:  # 4-byte elements: halve K tiles to stay within shared memory
        configs = [dict(c, BLOCK_K=min(c["BLOCK_K"], 32)) for c in _GPU_CONFIGS]
    return [(prologue, cfg) for prologue in PROLOGUES for cfg in configs]


def tuned_plan(x, w, gamma, bias, eps, prologues=PROLOGUES) -> tuple:
    """Time every (prologue, config) once per (M bucket, N, K, dtype, flags) and cache the fastest."""
    M, K = x.shape
    N = w.shape[0]
    key = (_bucket(M), N, K, x.dtype, x.device.type, gamma is not None, bias is not None, tuple(prologues))
    if key in _TUNED:
        return _TUNED[key]
    plans = [p for p in _candidate_plans(x) if p[0] in prologues]
    if not x.is_cuda:  # the interpreter cannot time anything meaningful
        _TUNED[key] = plans[0]
        return plans[0]
    from triton.testing import do_bench_cudagraph

    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    rstd = torch.empty(M, device=x.device, dtype=torch.float32)
    best, best_ms = None, float("inf")
    for plan in plans:
        try:
            _run(plan, x, gamma, w, bias, eps, out, rstd)  # compile outside the graph capture
            # GPU time only (graph replay): tuning may run inside Inductor's compile, where host-side overhead
            # is inflated by the Python dispatcher and would pick configs by launch cost
            ms = do_bench_cudagraph(lambda: _run(plan, x, gamma, w, bias, eps, out, rstd), rep=20,
                                    return_mode="median")
        except Exception:  # a config that does not compile or fit (shared memory) is skipped
            continue
        if ms < best_ms:
            best, best_ms = plan, ms
    if best is None:
        raise RuntimeError("no prenorm_gemm plan compiled for this shape")
    _TUNED[key] = best
    return best


def rms_norm_matmul(x: torch.Tensor, gamma: torch.Tensor | None, w: torch.Tensor, bias: torch.Tensor | None,
                    eps: float, *, plan: tuple | None = None):
    """out = rmsnorm(x; γ, eps) @ wᵀ + bias and rstd [M] (fp32); x [M, K], w [N, K].

    ``plan`` = (prologue, block config) forces one variant (tests, benchmarks); by default the fastest measured
    one. The prologue "plain" runs the bare GEMM without the norm (rstd is then left unwritten)."""
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    rstd = torch.empty(M, device=x.device, dtype=torch.float32)
    if M == 0:
        return out, rstd
    gamma = gamma.contiguous() if gamma is not None else None
    bias = bias.contiguous() if bias is not None else None
    _run(plan or tuned_plan(x, w, gamma, bias, eps), x, gamma, w, bias, eps, out, rstd)
    return out, rstd
