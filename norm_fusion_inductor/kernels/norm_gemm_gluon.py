"""The pre-norm GEMM on a hand-scheduled Hopper mainloop, written in Gluon (Triton's explicit-layout dialect).

Why a second mainloop: the Triton one (`norm_gemm.py`) leaves scheduling to the compiler. On the H200 it runs
1.06–1.2× cuBLAS, mostly because nothing overlaps a tile's epilogue and the next tile's pipeline fill; and its
in-loop prologue has to route the x tile through registers into the tensor cores (Triton 3.6 miscompiled the
variant that fed the wgmma from shared memory while also reading the tile into registers, NOTES.md). Gluon states
the schedule: here the next tile's first loads are issued before this tile's epilogue runs, the output store is
asynchronous (waited on only when its buffer is needed again), and the statistics read the x tile from shared
memory next to the asynchronous wgmma that reads the same buffer.

Math (design.md §1.1–1.2), x [M, K], W [N, K], γ folded into the weight by the caller (W' = W·diag γ):

    RMSNorm:   y = rstd · (x W'ᵀ) + b,                     rstd = rsqrt(mean(x²) + eps)
    LayerNorm: y = rstd · (x W'ᵀ − μ · u) + v,             u = column sums of W' (fp32), v = W β + b

ROW_STATS (the in-loop prologue): every K step, once the wgmma on the x tile is issued, the same shared-memory
tile is read into registers and Σx² (LayerNorm: Σ(x − s), Σ(x − s)², s = x[m, 0], so nothing cancels when
|μ| ≫ σ) is added per row. The tensor cores get x unchanged, straight from shared memory. ROW_SCALE (the pre-pass
prologue): rstd (and μ) come from a row kernel. Neither: the plain GEMM. The mean correction cancels two large
terms to fp32 accumulation error ∝ |μ|/σ (the same bound as the Triton pre-pass; 16-bit inputs only).

Schedule (per CTA of a persistent grid, tiles in grouped order): NUM_BUFFERS shared-memory stages, each an x tile
and a W tile loaded by TMA onto one mbarrier. The producer runs NUM_BUFFERS − 1 loads ahead of the wgmma; each
wgmma is asynchronous and the one before it is waited on before the next is issued, which is what frees a stage
for reuse. The last NUM_BUFFERS − 2 wgmmas of a tile are interleaved with the next tile's first loads, and the
epilogue (scale, bias, store) runs while those loads are in flight.

Launch: the TMA descriptors are made on the device (made on the host they cost ~180 µs per call). Inductor cannot
emit a Gluon kernel into its generated code, so when the pass traces a plan into the graph the launch becomes a
thin custom op (``norm_fusion::gluon_norm_gemm``) and the weight preparation (W·γ, u, v) stays in the graph as
aten ops for Inductor to compile. The selection counts that op's host time (selection._with_host_cost).

Measured on the H200 (BENCHMARKS.md, 2026-11-30): the in-loop prologue costs 1–14 % over this mainloop's plain
GEMM (the Triton mainloop's: 14–31 %); the plain GEMM is 1.04–1.24× cuBLAS.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

NO_STATS, RMS_STATS, LN_STATS = 0, 1, 2


@gluon.constexpr_function
def _mma_layout(BLOCK_N, num_warps):
    # one m64nNk16 wgmma per warpgroup, the warpgroups stacked along M (BLOCK_M = 16 · num_warps)
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16])


@gluon.constexpr_function
def _smem_layout(rows, cols, dtype):
    # TMA's and wgmma's shared-memory layout for a [rows, cols] tile: the widest swizzle the row allows
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dtype)


@gluon.constexpr_function
def _stats_layout(BLOCK_K, num_warps):
    # each thread reads a BLOCK_K / 4 run of one row: the row sums are mostly in-thread adds plus two shuffles
    return gl.BlockedLayout(size_per_thread=[1, BLOCK_K // 4], threads_per_warp=[8, 4],
                            warps_per_cta=[num_warps, 1], order=[1, 0])


@gluon.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """Grouped order: GROUP_M row blocks advance together along N so their x tiles stay in L2."""
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // num_pid_in_group) * GROUP_M
    group_size_m = gl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@gluon.jit
def _load_stage(producer, x_desc, w_desc, off_m, off_n, off_k, bars, x_bufs, w_bufs, NUM_BUFFERS: gl.constexpr,
                pred=True):
    """TMA the x and W tiles of one K step into the next stage; its mbarrier flips when both have landed."""
    stage = producer % NUM_BUFFERS
    bar = bars.index(stage)
    mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(x_desc, [off_m, off_k], bar, x_bufs.index(stage), pred)
    tma.async_copy_global_to_shared(w_desc, [off_n, off_k], bar, w_bufs.index(stage), pred)
    return producer + 1


@gluon.jit
def _mma_stage(consumer, acc, use_acc, sum_a, sum_b, shift, bars, x_bufs, w_bufs, NUM_BUFFERS: gl.constexpr,
               ROW_STATS: gl.constexpr, stats_layout: gl.constexpr):
    """Wait for a stage, retire the previous wgmma (its stage becomes free), issue this one asynchronously, and
    meanwhile add the x tile's row statistics from the same shared memory."""
    stage = consumer % NUM_BUFFERS
    mbarrier.wait(bars.index(stage), (consumer // NUM_BUFFERS) & 1)
    acc = warpgroup_mma_wait(0, (acc, ))
    x_tile = x_bufs.index(stage)
    acc = warpgroup_mma(x_tile, w_bufs.index(stage).permute((1, 0)), acc, use_acc=use_acc, is_async=True)
    if ROW_STATS != 0:
        x = x_tile.load(stats_layout).to(gl.float32)
        if ROW_STATS == 2:
            x = x - shift[:, None]
            sum_a += gl.sum(x, axis=1)
        sum_b += gl.sum(x * x, axis=1)
    return consumer + 1, acc, sum_a, sum_b


@gluon.jit
def norm_gemm_gluon_kernel(x_ptr, w_ptr, out_ptr, bias_ptr, rstd_ptr, mean_ptr, u_ptr, M, N, K,
                           stride_xm, stride_wn, stride_om, inv_k, eps,
                           ROW_STATS: gl.constexpr,  # 0 none, 1 RMSNorm (Σx²), 2 LayerNorm (shifted Σx, Σx²)
                           ROW_SCALE: gl.constexpr,  # rstd (and μ for CENTER) read from rstd_ptr / mean_ptr
                           CENTER: gl.constexpr,  # LayerNorm: subtract μ · u
                           HAS_BIAS: gl.constexpr, WRITE_STATS: gl.constexpr,
                           BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                           GROUP_M: gl.constexpr, NUM_BUFFERS: gl.constexpr, num_warps: gl.constexpr):
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    # descriptors made on the device (host-made ones cost ~180 µs of launch overhead per call, H200); the
    # layouts are derived here rather than passed, so the launcher's per-call key holds only plain values
    x_desc = tma.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K],
                                        _smem_layout(BLOCK_M, BLOCK_K, dtype))
    w_desc = tma.make_tensor_descriptor(w_ptr, [N, K], [stride_wn, 1], [BLOCK_N, BLOCK_K],
                                        _smem_layout(BLOCK_N, BLOCK_K, dtype))
    out_desc = tma.make_tensor_descriptor(out_ptr, [M, N], [stride_om, 1], [BLOCK_M, BLOCK_N],
                                          _smem_layout(BLOCK_M, BLOCK_N, dtype))
    gl.static_assert(BLOCK_M == 16 * num_warps, "one wgmma row slab per warp")
    gl.static_assert(NUM_BUFFERS >= 3, "a stage in flight, one being read, one being loaded")
    mma_layout: gl.constexpr = _mma_layout(BLOCK_N, num_warps)
    stats_layout: gl.constexpr = _stats_layout(BLOCK_K, num_warps)
    row_layout: gl.constexpr = gl.SliceLayout(1, mma_layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, mma_layout)
    stats_row_layout: gl.constexpr = gl.SliceLayout(1, stats_layout)
    inv_k = inv_k.to(gl.float32)
    eps = eps.to(gl.float32)

    x_bufs = gl.allocate_shared_memory(dtype, [NUM_BUFFERS] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(dtype, [NUM_BUFFERS] + w_desc.block_type.shape, w_desc.layout)
    out_smem = gl.allocate_shared_memory(dtype, out_desc.block_type.shape, out_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [NUM_BUFFERS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BUFFERS):
        mbarrier.init(bars.index(i), count=1)

    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    start = gl.program_id(0)
    stride = gl.num_programs(0)
    my_tiles = gl.cdiv(num_tiles - start, stride)
    k_tiles = gl.cdiv(K, BLOCK_K)  # the host guarantees k_tiles >= NUM_BUFFERS - 1

    producer = 0
    consumer = 0
    acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
    use_acc = gl.to_tensor(False)

    # the first tile's pipeline fill
    pid_m, pid_n = _tile_coords(start, num_pid_m, num_pid_n, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    for ki in gl.static_range(NUM_BUFFERS - 1):
        producer = _load_stage(producer, x_desc, w_desc, off_m, off_n, ki * BLOCK_K, bars, x_bufs, w_bufs,
                               NUM_BUFFERS)

    for t in range(my_tiles):
        rows = off_m + gl.arange(0, BLOCK_M, layout=stats_row_layout)
        sum_a = gl.zeros((BLOCK_M, ), dtype=gl.float32, layout=stats_row_layout)
        sum_b = gl.zeros((BLOCK_M, ), dtype=gl.float32, layout=stats_row_layout)
        if ROW_STATS == 2:
            shift = gl.load(x_ptr + rows * stride_xm, mask=rows < M, other=0.0).to(gl.float32)
        else:
            shift = sum_a
        consumer, acc, sum_a, sum_b = _mma_stage(consumer, acc, use_acc, sum_a, sum_b, shift, bars, x_bufs, w_bufs,
                                                 NUM_BUFFERS, ROW_STATS, stats_layout)
        use_acc = gl.to_tensor(True)
        for ki in range(NUM_BUFFERS - 1, k_tiles):
            producer = _load_stage(producer, x_desc, w_desc, off_m, off_n, ki * BLOCK_K, bars, x_bufs, w_bufs,
                                   NUM_BUFFERS)
            consumer, acc, sum_a, sum_b = _mma_stage(consumer, acc, use_acc, sum_a, sum_b, shift, bars, x_bufs,
                                                     w_bufs, NUM_BUFFERS, ROW_STATS, stats_layout)
        # the next tile's fill, interleaved with this tile's last wgmmas
        tile_m = off_m
        tile_n = off_n
        tile_pid_n = pid_n
        pid_m, pid_n = _tile_coords(start + (t + 1) * stride, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        has_next = t + 1 < my_tiles
        for ki in gl.static_range(NUM_BUFFERS - 2):
            producer = _load_stage(producer, x_desc, w_desc, off_m, off_n, ki * BLOCK_K, bars, x_bufs, w_bufs,
                                   NUM_BUFFERS, has_next)
            consumer, acc, sum_a, sum_b = _mma_stage(consumer, acc, use_acc, sum_a, sum_b, shift, bars, x_bufs,
                                                     w_bufs, NUM_BUFFERS, ROW_STATS, stats_layout)
        producer = _load_stage(producer, x_desc, w_desc, off_m, off_n, (NUM_BUFFERS - 2) * BLOCK_K, bars, x_bufs,
                               w_bufs, NUM_BUFFERS, has_next)
        acc = warpgroup_mma_wait(0, (acc, ))
        use_acc = gl.to_tensor(False)  # the next tile's first wgmma overwrites acc

        # epilogue, while the next tile's loads are in flight
        out = acc
        if ROW_STATS != 0 or ROW_SCALE:
            if ROW_STATS == 2:
                mean_shifted = sum_a * inv_k
                rstd = gl.rsqrt(gl.maximum(sum_b * inv_k - mean_shifted * mean_shifted, 0.0) + eps)
                mean = shift + mean_shifted
            elif ROW_STATS == 1:
                rstd = gl.rsqrt(sum_b * inv_k + eps)
                mean = sum_a
            else:
                rstd = gl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
                if CENTER:
                    mean = gl.load(mean_ptr + rows, mask=rows < M, other=0.0)
                else:
                    mean = rstd
            if WRITE_STATS:
                if tile_pid_n == 0:
                    gl.store(rstd_ptr + rows, rstd, mask=rows < M)
                    if CENTER:
                        gl.store(mean_ptr + rows, mean, mask=rows < M)
            row_rstd = gl.convert_layout(rstd, row_layout)
            if CENTER:
                cols = tile_n + gl.arange(0, BLOCK_N, layout=col_layout)
                u = gl.load(u_ptr + cols, mask=cols < N, other=0.0)
                out = out - gl.convert_layout(mean, row_layout)[:, None] * u[None, :]
            out = out * row_rstd[:, None]
        if HAS_BIAS:
            cols = tile_n + gl.arange(0, BLOCK_N, layout=col_layout)
            out = out + gl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)[None, :]
        tma.store_wait(pendings=0)  # the previous tile's store has left out_smem
        out_smem.store(out.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(out_desc, [tile_m, tile_n], out_smem)
    tma.store_wait(pendings=0)
    for i in gl.static_range(NUM_BUFFERS):
        mbarrier.invalidate(bars.index(i))


# BLOCK_M is 16 · num_warps (one wgmma slab per warp); BLOCK_N ≤ 256 (one wgmma wide). Measured on the H200
# (benchmarks/gluon_probe.py, 2026-11-30): 128×256 with 3 stages is the fastest of these at every shape tried.
CONFIGS = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_BUFFERS=3, GROUP_M=8, num_warps=8),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, NUM_BUFFERS=4, GROUP_M=8, num_warps=8),
    dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, NUM_BUFFERS=4, GROUP_M=8, num_warps=4),
]

_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


def unsupported_reason(dtype: torch.dtype, device: torch.device, K: int, cfg: dict, prologue: str,
                       layer_norm: bool, w_kn: bool = False) -> str | None:
    """None if this mainloop can run the plan (prologue, cfg) on these operands, else why not."""
    if dtype not in _GL_DTYPES:
        return f"dtype {dtype} (the Gluon mainloop takes 16-bit inputs)"
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] != 9:
        return "the Gluon mainloop is written for sm_90 (wgmma)"
    if w_kn:
        return "weights stored [K, N] are not wired to the Gluon mainloop"
    if triton.cdiv(K, cfg["BLOCK_K"]) < cfg["NUM_BUFFERS"] - 1:
        return f"K={K} has fewer K steps than the pipeline's fill"
    if layer_norm and prologue == "in_loop" and K % cfg["BLOCK_K"]:
        return "the shifted LayerNorm sums need whole K tiles (zero padding would add −s)"
    return None


def run(prologue, cfg, x, w_eff, out, rstd, eps, bias=None, mean=None):
    """One plan of norm_gemm's prologues on this mainloop (norm_gemm._run hands over the "gluon_*" plans): γ is
    already folded into ``w_eff`` [N, K] and, for LayerNorm (``mean`` given), β into the fp32 ``bias``."""
    from .norm_gemm import _row_stats

    # column sums of the rounded W·γ the GEMM uses: the mean correction cancels against exactly these
    u = w_eff.sum(1, dtype=torch.float32) if mean is not None else None
    if prologue == "plain":
        launch(x, w_eff, out, cfg, bias=bias)
    elif prologue == "pre_pass":
        _row_stats(x, rstd, mean, eps)
        launch(x, w_eff, out, cfg, row_scale=True, bias=bias, rstd=rstd, mean=mean, u=u, eps=eps)
    else:
        launch(x, w_eff, out, cfg, row_stats=LN_STATS if mean is not None else RMS_STATS, bias=bias, rstd=rstd,
               mean=mean, u=u, eps=eps, write_stats=rstd is not None)


def launch(x, w, out, cfg, *, row_stats=NO_STATS, row_scale=False, bias=None, rstd=None, mean=None, u=None,
           eps=0.0, write_stats=False):
    """out = epilogue(x @ wᵀ) with w [N, K] (γ already folded in); see the module doc for the flags.

    While the pass traces a plan into the graph (fake tensors, ops.trace_direct_launch) this records the launch
    op below instead: Inductor cannot emit a Gluon kernel into its generated code, so the graph calls this thin
    op, and everything around the kernel (W·γ, u, v) stays in the graph for Inductor to compile."""
    from . import norm_gemm

    args = (x, w, out, bias, rstd, mean, u, eps, row_stats, row_scale, write_stats, cfg["BLOCK_M"], cfg["BLOCK_N"],
            cfg["BLOCK_K"], cfg["NUM_BUFFERS"], cfg["GROUP_M"], cfg["num_warps"])
    if norm_gemm._traced(x):
        torch.ops.norm_fusion.gluon_norm_gemm(*args)
    else:
        _launch_kernel(*args)


@torch.library.custom_op("norm_fusion::gluon_norm_gemm", mutates_args=("out", "rstd", "mean"))
def _launch_op(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, bias: Optional[torch.Tensor],
               rstd: Optional[torch.Tensor], mean: Optional[torch.Tensor], u: Optional[torch.Tensor], eps: float,
               row_stats: int, row_scale: bool, write_stats: bool, block_m: int, block_n: int, block_k: int,
               num_buffers: int, group_m: int, num_warps: int) -> None:
    _launch_kernel(x, w, out, bias, rstd, mean, u, eps, row_stats, row_scale, write_stats, block_m, block_n,
                   block_k, num_buffers, group_m, num_warps)


@_launch_op.register_fake
def _(*args) -> None:
    return None


def _launch_kernel(x, w, out, bias, rstd, mean, u, eps, row_stats, row_scale, write_stats, bm, bn, bk, num_buffers,
                   group_m, num_warps):
    from . import norm_gemm

    M, K = x.shape
    N = w.shape[0]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    grid = (min(norm_gemm._num_sms(x.device.index or 0), tiles), )
    norm_gemm._ensure_allocator()  # device-side descriptors live in Triton's global scratch
    dummy = out
    norm_gemm_gluon_kernel[grid](
        x, w, out, *(t if t is not None else dummy for t in (bias, rstd, mean, u)), M, N, K,
        x.stride(0), w.stride(0), out.stride(0), 1.0 / K, eps,
        ROW_STATS=row_stats, ROW_SCALE=row_scale, CENTER=mean is not None, HAS_BIAS=bias is not None,
        WRITE_STATS=write_stats, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m, NUM_BUFFERS=num_buffers,
        num_warps=num_warps)
