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

W_KN: the weight is stored [K, N] instead (GPT-2's Conv1D: y = x W with W [K, N]); the same math with W'ᵀ
stored, u[n] = Σ_k W'[k, n]. Only the W tile changes: TMA loads [BLOCK_K, BLOCK_N] tiles at [k, n] and the wgmma
takes them as its B operand directly (N-major in shared memory) instead of through a permuted [BLOCK_N, BLOCK_K]
view. Checked against float64 on the H200 for every config and prologue (``benchmarks/diagnostics/gluon_probe.py --w-kn``).

ROW_STATS (the in-loop prologue): every K step, once the wgmma on the x tile is issued, the same shared-memory
tile is read into registers and Σx² (LayerNorm: Σ(x − s), Σ(x − s)², s = x[m, 0], so nothing cancels when
|μ| ≫ σ) is added per row. The tensor cores get x unchanged, straight from shared memory. ROW_SCALE (the pre-pass
prologue): rstd (and μ) come from a row kernel. Neither: the plain GEMM. The mean correction cancels two large
terms to fp32 accumulation error ∝ |μ|/σ (the same bound as the Triton pre-pass; 16-bit inputs only).

POST_NORM (the post-norm, ``post_run``; norm_gemm.py's whole-row epilogue on this mainloop): the norm of the
GEMM's output rows, z = x Wᵀ + b + residual, y = norm(z)·γ (+ β) (+ residual_out), when a tile holds whole rows
(N ≤ BLOCK_N). Same mainloop (plain GEMM), another epilogue (``_post_norm``): exact two-pass row moments in
registers, rstd (and μ) stored for every row. What it gains over the Triton row plan is the overlap: the next
tile's loads are in flight during this epilogue. The post-norm's operands are None when absent, so the other
variants' PTX is unchanged. Offered with POST_CONFIGS (norm_gemm.post_tuned_plan) since it was right on the H200
(``benchmarks/diagnostics/gluon_probe.py --post``).

Schedule (per CTA of a persistent grid, tiles in grouped order): NUM_BUFFERS shared-memory stages, each an x tile
and a W tile loaded by TMA onto one mbarrier. The producer runs NUM_BUFFERS − 1 loads ahead of the wgmma; each
wgmma is asynchronous and the one before it is waited on before the next is issued, which is what frees a stage
for reuse. The last NUM_BUFFERS − 2 wgmmas of a tile are interleaved with the next tile's first loads, and the
epilogue (scale, bias, store) runs while those loads are in flight. Nothing the epilogue reads waits for it: the
bias, u (and ROW_SCALE's rstd, μ) are loaded when the tile starts (``_epilogue_vectors``), and LayerNorm's row
shifts of the next tile before this tile's epilogue. Loaded in the epilogue, each was an unhidden global-memory
round trip per tile; prefetched, the in-loop LayerNorm runs faster with outputs bit for bit the same
(docs/decisions.md#norm_gemm_gluon_epilogue_vectors).

Warp-specialized variant (``norm_gemm_gluon_ws_kernel``, WS_CONFIGS): the same math and epilogue (the helpers
``_tile_stats_init``, ``_add_row_stats``, ``_epilogue_vectors``, ``_epilogue`` are shared), with the TMA loads in
a 1-warp producer partition and the wgmmas, row sums and epilogue in the consumer warps, synchronised by
ready/empty mbarrier rings (its docstring has the protocol). OFFERED_WS are its configs the selection tries.

Launch: the TMA descriptors are made on the device (made on the host they cost ~180 µs per call). Inductor cannot
emit a Gluon kernel into its generated code, so when the pass traces a plan into the graph the launch becomes a
thin op (``norm_fusion::gluon_norm_gemm``, declared without custom_op's Python autograd layers) and the weight
preparation (W·γ, u, v) stays in the graph as aten ops for Inductor to compile. A repeated launch calls the
compiled kernel directly, skipping the JIT's argument binding (``launch.cached_launch``). The selection counts the
remaining host time (selection._with_host_cost).

The in-loop prologue costs this mainloop less over its plain GEMM than it costs the Triton mainloop
(docs/decisions.md#norm_gemm_gluon-module-docstring).
"""

from __future__ import annotations

import contextlib

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from . import tuning
from .common import ensure_allocator as _ensure_allocator  # module-level names: tests stand in for the GPU
from .common import num_sms as _num_sms
from .common import traced
from .launch import cached_launch as _cached_launch
from .row_norm import post_norm_unsupported_reason, row_stats

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
def _descriptors(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_w, stride_om, BLOCK_M: gl.constexpr,
                 BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, W_KN: gl.constexpr):
    """The TMA descriptors of x, W and out, made on the device (host-made ones cost ~180 µs of launch overhead
    per call, H200); the layouts are derived here rather than passed, so the launcher's per-call key holds only
    plain values. W is [N, K] with row stride ``stride_w``, or with W_KN [K, N] (``stride_w`` its K stride)."""
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    x_desc = tma.make_tensor_descriptor(x_ptr, [M, K], [stride_xm, 1], [BLOCK_M, BLOCK_K],
                                        _smem_layout(BLOCK_M, BLOCK_K, dtype))
    if W_KN:
        w_desc = tma.make_tensor_descriptor(w_ptr, [K, N], [stride_w, 1], [BLOCK_K, BLOCK_N],
                                            _smem_layout(BLOCK_K, BLOCK_N, dtype))
    else:
        w_desc = tma.make_tensor_descriptor(w_ptr, [N, K], [stride_w, 1], [BLOCK_N, BLOCK_K],
                                            _smem_layout(BLOCK_N, BLOCK_K, dtype))
    out_desc = tma.make_tensor_descriptor(out_ptr, [M, N], [stride_om, 1], [BLOCK_M, BLOCK_N],
                                          _smem_layout(BLOCK_M, BLOCK_N, dtype))
    return x_desc, w_desc, out_desc


@gluon.jit
def _stage_buffers(x_desc, w_desc, out_desc, NUM_BUFFERS: gl.constexpr):
    """Shared memory: NUM_BUFFERS stages of an x and a W tile (as w_desc's block: [BLOCK_N, BLOCK_K], or
    [BLOCK_K, BLOCK_N] with W_KN), and the output tile's staging buffer."""
    dtype: gl.constexpr = x_desc.dtype
    x_bufs = gl.allocate_shared_memory(dtype, [NUM_BUFFERS] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(dtype, [NUM_BUFFERS] + w_desc.block_type.shape, w_desc.layout)
    out_smem = gl.allocate_shared_memory(dtype, out_desc.block_type.shape, out_desc.layout)
    return x_bufs, w_bufs, out_smem


@gluon.jit
def _tile_walk(M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """This CTA's share of the persistent grid: tiles start, start + stride, ... (my_tiles of them)."""
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    start = gl.program_id(0)
    stride = gl.num_programs(0)
    my_tiles = gl.cdiv(num_pid_m * num_pid_n - start, stride)
    return num_pid_m, num_pid_n, start, stride, my_tiles


@gluon.jit
def _load_stage(producer, x_desc, w_desc, off_m, off_n, off_k, bars, x_bufs, w_bufs, NUM_BUFFERS: gl.constexpr,
                W_KN: gl.constexpr, pred=True):
    """TMA the x and W tiles of one K step into the next stage; its mbarrier flips when both have landed."""
    stage = producer % NUM_BUFFERS
    bar = bars.index(stage)
    mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(x_desc, [off_m, off_k], bar, x_bufs.index(stage), pred)
    if W_KN:
        tma.async_copy_global_to_shared(w_desc, [off_k, off_n], bar, w_bufs.index(stage), pred)
    else:
        tma.async_copy_global_to_shared(w_desc, [off_n, off_k], bar, w_bufs.index(stage), pred)
    return producer + 1


@gluon.jit
def _w_operand(w_tile, W_KN: gl.constexpr):
    """A stage's W tile as the wgmma's B operand [BLOCK_K, BLOCK_N]: a [K, N] tile as it is, an [N, K] tile
    through a transposed view (K-major B)."""
    if W_KN:
        return w_tile
    else:
        return w_tile.permute((1, 0))


@gluon.jit
def _mma_stage(consumer, acc, use_acc, sum_a, sum_b, shift, stats_gate, bars, x_bufs, w_bufs,
               NUM_BUFFERS: gl.constexpr, ROW_STATS: gl.constexpr, stats_layout: gl.constexpr, W_KN: gl.constexpr):
    """Wait for a stage, retire the previous wgmma (its stage becomes free), issue this one asynchronously, and
    meanwhile add the x tile's row statistics from the same shared memory (``_stats_gate``)."""
    stage = consumer % NUM_BUFFERS
    mbarrier.wait(bars.index(stage), (consumer // NUM_BUFFERS) & 1)
    acc = warpgroup_mma_wait(0, (acc, ))
    x_tile = x_bufs.index(stage)
    acc = warpgroup_mma(x_tile, _w_operand(w_bufs.index(stage), W_KN), acc, use_acc=use_acc, is_async=True)
    sum_a, sum_b = _add_row_stats(x_tile, sum_a, sum_b, shift, ROW_STATS, stats_layout, stats_gate)
    return consumer + 1, acc, sum_a, sum_b


@gluon.jit
def _tile_stats_init(x_ptr, off_m, M, stride_xm, ROW_STATS: gl.constexpr, BLOCK_M: gl.constexpr,
                     stats_layout: gl.constexpr):
    """A tile's rows and zeroed row sums (in the layout the x tile is read in); LayerNorm's shift s = x[m, 0]."""
    stats_row_layout: gl.constexpr = gl.SliceLayout(1, stats_layout)
    rows = off_m + gl.arange(0, BLOCK_M, layout=stats_row_layout)
    sum_a = gl.zeros((BLOCK_M, ), dtype=gl.float32, layout=stats_row_layout)
    sum_b = gl.zeros((BLOCK_M, ), dtype=gl.float32, layout=stats_row_layout)
    if ROW_STATS == 2:
        shift = gl.load(x_ptr + rows * stride_xm, mask=rows < M, other=0.0).to(gl.float32)
    else:
        shift = sum_a
    return rows, sum_a, sum_b, shift


@gluon.jit
def _add_row_stats(x_tile, sum_a, sum_b, shift, ROW_STATS: gl.constexpr, stats_layout: gl.constexpr, gate):
    """One K step's row sums, read from the x tile in shared memory: RMS Σx² (sum_b); LayerNorm Σ(x − s) (sum_a)
    and Σ(x − s)² (sum_b). ``gate``: see _stats_gate."""
    if ROW_STATS != 0:
        if gate:
            x = x_tile.load(stats_layout).to(gl.float32)
            if ROW_STATS == 2:
                x = x - shift[:, None]
                sum_a += gl.sum(x, axis=1)
            sum_b += gl.sum(x * x, axis=1)
    return sum_a, sum_b


@gluon.jit
def _stats_gate(inv_k, STATS_OWN_BLOCK: gl.constexpr):
    """The condition the row sums run under: constexpr True, or with STATS_OWN_BLOCK a runtime value that is always
    true (inv_k = 1/K > 0). Why: ptxas fills the gaps between the four k16 HGMMAs of a BLOCK_K = 64 wgmma with the
    row sums' instructions (offline SASS, sm_90, both schedules: 104–126 of them inside a wgmma for RMSNorm,
    178–185 for LayerNorm), so the later HGMMAs are issued only after them and the tensor cores may wait. Behind a
    branch the sums are a basic block of their own, after the four HGMMAs, which are then issued back to back as
    in the plain GEMM (tests/test_sm90_compile.py checks it)."""
    if STATS_OWN_BLOCK:
        gate = inv_k > 0.0
    else:
        gate = gl.constexpr(True)
    return gate


@gluon.jit
def _epilogue_vectors(tile_m, tile_n, M, N, bias_ptr, u_ptr, rstd_ptr, mean_ptr, ROW_SCALE: gl.constexpr,
                      CENTER: gl.constexpr, HAS_BIAS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                      num_warps: gl.constexpr):
    """The vectors a tile's epilogue reads (bias, u by column; rstd, μ by row with ROW_SCALE), loaded when the
    tile starts, in a compact layout (about one element a thread), so that their global-memory latency passes
    under the mainloop; ``_epilogue`` moves them into the accumulator's layout. Loaded in that layout only at
    the epilogue, each was a stall of every tile. Absent ones are zeros (never read)."""
    vec_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[num_warps],
                                                order=[0])
    cols = tile_n + gl.arange(0, BLOCK_N, layout=vec_layout)
    rows = tile_m + gl.arange(0, BLOCK_M, layout=vec_layout)
    bias = gl.zeros((BLOCK_N, ), dtype=gl.float32, layout=vec_layout)
    u = bias
    rstd = gl.zeros((BLOCK_M, ), dtype=gl.float32, layout=vec_layout)
    mean = rstd
    if HAS_BIAS:
        bias = gl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)
    if CENTER:
        u = gl.load(u_ptr + cols, mask=cols < N, other=0.0)
    if ROW_SCALE:
        rstd = gl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
        if CENTER:
            mean = gl.load(mean_ptr + rows, mask=rows < M, other=0.0)
    return bias, u, rstd, mean


@gluon.jit
def _epilogue(acc, rows, sum_a, sum_b, shift, vectors, tile_m, tile_n, tile_pid_n, out_desc, out_smem, M, N, inv_k,
              eps, rstd_ptr, mean_ptr, res_ptr, gamma_ptr, beta_ptr, z_ptr, res_out_ptr, stride_om,
              ROW_STATS: gl.constexpr, ROW_SCALE: gl.constexpr, CENTER: gl.constexpr, HAS_BIAS: gl.constexpr,
              WRITE_STATS: gl.constexpr, POST_NORM: gl.constexpr):
    """One tile's out = rstd · (acc − μ · u) + b, cast and stored asynchronously (TMA) from ``out_smem``; with
    POST_NORM, out = norm(acc + b + residual) instead (``_post_norm``).

    rstd and μ come from the tile's row sums or, with ROW_SCALE, from rstd_ptr / mean_ptr (prefetched, as are b
    and u, into ``vectors`` by ``_epilogue_vectors``):
        RMSNorm    rstd = rsqrt(Σx²/K + eps)
        LayerNorm  μ = s + Σ(x − s)/K,  σ² = Σ(x − s)²/K − (Σ(x − s)/K)²,  rstd = rsqrt(σ² + eps)
    WRITE_STATS stores them (from the tiles of column block 0). The previous tile's store is waited on only here,
    just before ``out_smem`` is rewritten. Both kernels call this, with the accumulator in _mma_layout."""
    dtype: gl.constexpr = out_desc.dtype
    row_layout: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, acc.type.layout)
    bias_v, u_v, rstd_v, mean_v = vectors
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
            rstd = gl.convert_layout(rstd_v, rows.type.layout)
            mean = gl.convert_layout(mean_v, rows.type.layout)
        if WRITE_STATS:
            if tile_pid_n == 0:
                gl.store(rstd_ptr + rows, rstd, mask=rows < M)
                if CENTER:
                    gl.store(mean_ptr + rows, mean, mask=rows < M)
        row_rstd = gl.convert_layout(rstd, row_layout)
        if CENTER:
            u = gl.convert_layout(u_v, col_layout)
            out = out - gl.convert_layout(mean, row_layout)[:, None] * u[None, :]
        out = out * row_rstd[:, None]
    if HAS_BIAS:
        out = out + gl.convert_layout(bias_v, col_layout)[None, :]
    if POST_NORM != 0:
        out = _post_norm(out, tile_m, M, N, stride_om, eps, res_ptr, gamma_ptr, beta_ptr, z_ptr, res_out_ptr,
                         rstd_ptr, mean_ptr, POST_NORM, dtype)
    tma.store_wait(pendings=0)  # the previous tile's store has left out_smem
    out_smem.store(out.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(out_desc, [tile_m, tile_n], out_smem)


@gluon.jit
def _post_norm(z, tile_m, M, N, stride_om, eps, res_ptr, gamma_ptr, beta_ptr, z_ptr, res_out_ptr, rstd_ptr,
               mean_ptr, POST_NORM: gl.constexpr, dtype: gl.constexpr):
    """The post-norm of a tile holding whole rows (N ≤ BLOCK_N), z = acc + b on entry:

        z ← z + residual                        (stored to z_ptr when given)
        RMSNorm    rstd = rsqrt(Σz²/N + eps),              y = z · rstd · γ
        LayerNorm  μ = Σz/N, rstd = rsqrt(Σ(z − μ)²/N + eps), y = (z − μ) · rstd · γ + β
        y ← y + residual_out

    The sums run over the N valid columns only, in two passes over the registers for LayerNorm (nothing cancels
    when |μ| ≫ σ): z is exactly 0 in the columns ≥ N (TMA zero-fills W past N; bias and residual are
    loaded as 0), so Σz and Σz² need no mask (an explicit one cost the RMSNorm variant 84 bytes of spills), and
    z − μ is masked. rstd (and μ) are stored for every row: each tile is a whole row block. A pointer that is None
    switches its term off. The [M, N] operands share out's row stride and are read and written with masked
    pointer accesses in the accumulator's layout (a TMA staging buffer for them would not fit in shared memory
    beside the 128×256 config's stages)."""
    BLOCK_M: gl.constexpr = z.shape[0]
    BLOCK_N: gl.constexpr = z.shape[1]
    rows = tile_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, z.type.layout))
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, z.type.layout))
    row_ok = rows < M
    col_ok = cols < N
    in_tile = row_ok[:, None] & col_ok[None, :]
    offs = rows[:, None] * stride_om + cols[None, :]
    if res_ptr is not None:
        z = z + gl.load(res_ptr + offs, mask=in_tile, other=0.0).to(gl.float32)
    if z_ptr is not None:
        gl.store(z_ptr + offs, z.to(dtype), mask=in_tile)
    inv_n = 1.0 / N.to(gl.float32)
    # (columns ≥ N hold 0 already: docstring)
    if POST_NORM == 2:
        mean = gl.sum(z, axis=1) * inv_n
        z = gl.where(col_ok[None, :], z - mean[:, None], 0.0)
        gl.store(mean_ptr + rows, mean, mask=row_ok)
    rstd = gl.rsqrt(gl.sum(z * z, axis=1) * inv_n + eps)
    gl.store(rstd_ptr + rows, rstd, mask=row_ok)
    y = z * rstd[:, None]
    if gamma_ptr is not None:
        y = y * gl.load(gamma_ptr + cols, mask=col_ok, other=0.0).to(gl.float32)[None, :]
    if beta_ptr is not None:
        y = y + gl.load(beta_ptr + cols, mask=col_ok, other=0.0).to(gl.float32)[None, :]
    if res_out_ptr is not None:
        y = y + gl.load(res_out_ptr + offs, mask=in_tile, other=0.0).to(gl.float32)
    return y


@gluon.jit
def norm_gemm_gluon_kernel(x_ptr, w_ptr, out_ptr, bias_ptr, rstd_ptr, mean_ptr, u_ptr, M, N, K,
                           stride_xm, stride_w, stride_om, inv_k, eps,
                           res_ptr, gamma_ptr, beta_ptr, z_ptr, res_out_ptr,  # POST_NORM's; None: off
                           ROW_STATS: gl.constexpr,  # 0 none, 1 RMSNorm (Σx²), 2 LayerNorm (shifted Σx, Σx²)
                           ROW_SCALE: gl.constexpr,  # rstd (and μ for CENTER) read from rstd_ptr / mean_ptr
                           CENTER: gl.constexpr,  # LayerNorm: subtract μ · u
                           HAS_BIAS: gl.constexpr, WRITE_STATS: gl.constexpr,
                           W_KN: gl.constexpr,  # w stored [K, N] (x @ w), else [N, K] (x @ wᵀ)
                           POST_NORM: gl.constexpr,  # 0 none, 1 RMSNorm, 2 LayerNorm of the output rows (N ≤ BLOCK_N)
                           BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                           GROUP_M: gl.constexpr, NUM_BUFFERS: gl.constexpr, num_warps: gl.constexpr,
                           STATS_OWN_BLOCK: gl.constexpr = False):  # the row sums in a basic block of their own
    x_desc, w_desc, out_desc = _descriptors(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_w, stride_om,
                                            BLOCK_M, BLOCK_N, BLOCK_K, W_KN)
    gl.static_assert(BLOCK_M == 16 * num_warps, "one wgmma row slab per warp")
    gl.static_assert(NUM_BUFFERS >= 3, "a stage in flight, one being read, one being loaded")
    mma_layout: gl.constexpr = _mma_layout(BLOCK_N, num_warps)
    stats_layout: gl.constexpr = _stats_layout(BLOCK_K, num_warps)
    inv_k = inv_k.to(gl.float32)
    eps = eps.to(gl.float32)
    stats_gate = _stats_gate(inv_k, STATS_OWN_BLOCK)

    x_bufs, w_bufs, out_smem = _stage_buffers(x_desc, w_desc, out_desc, NUM_BUFFERS)
    bars = gl.allocate_shared_memory(gl.int64, [NUM_BUFFERS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BUFFERS):
        mbarrier.init(bars.index(i), count=1)

    num_pid_m, num_pid_n, start, stride, my_tiles = _tile_walk(M, N, BLOCK_M, BLOCK_N)
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
                               NUM_BUFFERS, W_KN)

    rows, sum_a, sum_b, shift = _tile_stats_init(x_ptr, off_m, M, stride_xm, ROW_STATS, BLOCK_M, stats_layout)
    for t in range(my_tiles):
        vectors = _epilogue_vectors(off_m, off_n, M, N, bias_ptr, u_ptr, rstd_ptr, mean_ptr, ROW_SCALE, CENTER,
                                    HAS_BIAS, BLOCK_M, BLOCK_N, num_warps)
        consumer, acc, sum_a, sum_b = _mma_stage(consumer, acc, use_acc, sum_a, sum_b, shift, stats_gate, bars,
                                                 x_bufs, w_bufs, NUM_BUFFERS, ROW_STATS, stats_layout, W_KN)
        use_acc = gl.to_tensor(True)
        for ki in range(NUM_BUFFERS - 1, k_tiles):
            producer = _load_stage(producer, x_desc, w_desc, off_m, off_n, ki * BLOCK_K, bars, x_bufs, w_bufs,
                                   NUM_BUFFERS, W_KN)
            consumer, acc, sum_a, sum_b = _mma_stage(consumer, acc, use_acc, sum_a, sum_b, shift, stats_gate, bars,
                                                     x_bufs, w_bufs, NUM_BUFFERS, ROW_STATS, stats_layout, W_KN)
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
                                   NUM_BUFFERS, W_KN, has_next)
            consumer, acc, sum_a, sum_b = _mma_stage(consumer, acc, use_acc, sum_a, sum_b, shift, stats_gate, bars,
                                                     x_bufs, w_bufs, NUM_BUFFERS, ROW_STATS, stats_layout, W_KN)
        producer = _load_stage(producer, x_desc, w_desc, off_m, off_n, (NUM_BUFFERS - 2) * BLOCK_K, bars, x_bufs,
                               w_bufs, NUM_BUFFERS, W_KN, has_next)
        acc = warpgroup_mma_wait(0, (acc, ))
        use_acc = gl.to_tensor(False)  # the next tile's first wgmma overwrites acc

        # the next tile's row sums start here: LayerNorm's load of its shifts then lands during this epilogue
        next_stats = _tile_stats_init(x_ptr, off_m, M, stride_xm, ROW_STATS, BLOCK_M, stats_layout)
        # epilogue, while the next tile's loads are in flight
        _epilogue(acc, rows, sum_a, sum_b, shift, vectors, tile_m, tile_n, tile_pid_n, out_desc, out_smem, M, N,
                  inv_k, eps, rstd_ptr, mean_ptr, res_ptr, gamma_ptr, beta_ptr, z_ptr, res_out_ptr, stride_om,
                  ROW_STATS, ROW_SCALE, CENTER, HAS_BIAS, WRITE_STATS, POST_NORM)
        rows, sum_a, sum_b, shift = next_stats
    tma.store_wait(pendings=0)
    for i in gl.static_range(NUM_BUFFERS):
        mbarrier.invalidate(bars.index(i))


@gluon.jit
def _ws_producer(x_desc, w_desc, x_bufs, w_bufs, ready, empty, M, N, K, ROW_STATS: gl.constexpr,
                 GROUP_M: gl.constexpr, NUM_BUFFERS: gl.constexpr, W_KN: gl.constexpr):
    """The warp-specialized kernel's producer (1 warp): every K step of every tile of this CTA, in order, TMA'd
    into the ring once the consumer has released the stage."""
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[1] if W_KN else w_desc.block_type.shape[0]
    num_pid_m, num_pid_n, start, stride, my_tiles = _tile_walk(M, N, BLOCK_M, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    c = 0  # the CTA's K-step counter, as in the consumer
    for t in range(my_tiles):
        pid_m, pid_n = _tile_coords(start + t * stride, num_pid_m, num_pid_n, GROUP_M)
        for ki in range(k_tiles):
            # the stage's previous use is released (parity of the previous round; round 0 passes at once)
            mbarrier.wait(empty.index(c % NUM_BUFFERS), ((c // NUM_BUFFERS) & 1) ^ 1)
            if ROW_STATS != 0:
                fence_async_shared()  # the consumer's generic-proxy reads of x before this async-proxy write
            c = _load_stage(c, x_desc, w_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, ki * BLOCK_K, ready, x_bufs, w_bufs,
                            NUM_BUFFERS, W_KN)


@gluon.jit
def _ws_consumer(x_ptr, x_bufs, w_bufs, ready, empty, out_desc, out_smem, bias_ptr, rstd_ptr, mean_ptr, u_ptr, M, N,
                 K, stride_xm, inv_k, eps, res_ptr, gamma_ptr, beta_ptr, z_ptr, res_out_ptr, stride_om,
                 ROW_STATS: gl.constexpr, ROW_SCALE: gl.constexpr, CENTER: gl.constexpr, HAS_BIAS: gl.constexpr,
                 WRITE_STATS: gl.constexpr, GROUP_M: gl.constexpr, NUM_BUFFERS: gl.constexpr,
                 num_warps: gl.constexpr, W_KN: gl.constexpr, POST_NORM: gl.constexpr,
                 STATS_OWN_BLOCK: gl.constexpr):
    """The warp-specialized kernel's consumer (the default partition, num_warps warps): per K step wait "ready",
    issue the wgmma asynchronously, add the row sums from the same x tile, retire the previous wgmma and release
    its stage; after the tile's last K step retire the last wgmma, release its stage, run the epilogue."""
    BLOCK_M: gl.constexpr = out_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = out_desc.block_type.shape[1]
    BLOCK_K: gl.constexpr = x_bufs.type.shape[2]
    stats_layout: gl.constexpr = _stats_layout(BLOCK_K, num_warps)
    stats_gate = _stats_gate(inv_k, STATS_OWN_BLOCK)
    num_pid_m, num_pid_n, start, stride, my_tiles = _tile_walk(M, N, BLOCK_M, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=_mma_layout(BLOCK_N, num_warps))
    c = 0  # the CTA's K-step counter, as in the producer
    pid_m, pid_n = _tile_coords(start, num_pid_m, num_pid_n, GROUP_M)
    rows, sum_a, sum_b, shift = _tile_stats_init(x_ptr, pid_m * BLOCK_M, M, stride_xm, ROW_STATS, BLOCK_M,
                                                 stats_layout)
    for t in range(my_tiles):
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        vectors = _epilogue_vectors(off_m, off_n, M, N, bias_ptr, u_ptr, rstd_ptr, mean_ptr, ROW_SCALE, CENTER,
                                    HAS_BIAS, BLOCK_M, BLOCK_N, num_warps)
        for ki in range(k_tiles):
            stage = c % NUM_BUFFERS
            mbarrier.wait(ready.index(stage), (c // NUM_BUFFERS) & 1)
            x_tile = x_bufs.index(stage)
            acc = warpgroup_mma(x_tile, _w_operand(w_bufs.index(stage), W_KN), acc, use_acc=ki > 0, is_async=True)
            sum_a, sum_b = _add_row_stats(x_tile, sum_a, sum_b, shift, ROW_STATS, stats_layout, stats_gate)
            acc = warpgroup_mma_wait(1, (acc, ))  # the previous wgmma has retired: its stage (c − 1) is free
            mbarrier.arrive(empty.index((c + NUM_BUFFERS - 1) % NUM_BUFFERS), pred=ki > 0)
            c += 1
        acc = warpgroup_mma_wait(0, (acc, ))
        mbarrier.arrive(empty.index((c + NUM_BUFFERS - 1) % NUM_BUFFERS))
        # the next tile's row sums start here: LayerNorm's load of its shifts then lands during this epilogue
        tile_pid_n = pid_n
        pid_m, pid_n = _tile_coords(start + (t + 1) * stride, num_pid_m, num_pid_n, GROUP_M)
        next_stats = _tile_stats_init(x_ptr, pid_m * BLOCK_M, M, stride_xm, ROW_STATS, BLOCK_M, stats_layout)
        # epilogue, while the producer loads the next tile's first stages
        _epilogue(acc, rows, sum_a, sum_b, shift, vectors, off_m, off_n, tile_pid_n, out_desc, out_smem, M, N,
                  inv_k, eps, rstd_ptr, mean_ptr, res_ptr, gamma_ptr, beta_ptr, z_ptr, res_out_ptr, stride_om,
                  ROW_STATS, ROW_SCALE, CENTER, HAS_BIAS, WRITE_STATS, POST_NORM)
        rows, sum_a, sum_b, shift = next_stats
    tma.store_wait(pendings=0)


@gluon.jit
def norm_gemm_gluon_ws_kernel(x_ptr, w_ptr, out_ptr, bias_ptr, rstd_ptr, mean_ptr, u_ptr, M, N, K,
                              stride_xm, stride_w, stride_om, inv_k, eps,
                              res_ptr, gamma_ptr, beta_ptr, z_ptr, res_out_ptr,
                              ROW_STATS: gl.constexpr, ROW_SCALE: gl.constexpr, CENTER: gl.constexpr,
                              HAS_BIAS: gl.constexpr, WRITE_STATS: gl.constexpr, W_KN: gl.constexpr,
                              POST_NORM: gl.constexpr,
                              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                              GROUP_M: gl.constexpr, NUM_BUFFERS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                              num_warps: gl.constexpr, STATS_OWN_BLOCK: gl.constexpr = False):
    """norm_gemm_gluon_kernel's math and epilogue on a warp-specialized ("cooperative") schedule, as in
    CUTLASS's sm90 warp-specialized kernels (the probe of commit 63b7537 measured it on the H200: its in-loop
    RMS 1–8 % faster than norm_gemm_gluon_kernel's, the plain GEMM about equal).

    Partitions (``gl.warp_specialize``)
        producer  1 warp, PRODUCER_REGS registers (setmaxnreg.dec): walks the CTA's tiles and K steps; per K step
                  waits until the ring stage is free ("empty") and TMA-loads the x and W tiles into it, both
                  completing on the stage's "ready" mbarrier (expect-tx with both tiles' bytes). It runs ahead
                  into the next tile while the consumer is in its epilogue: the pipeline fill is hidden.
        consumer  the default partition, num_warps warps (BLOCK_M = 16 · num_warps rows, the warpgroups stacked
                  along M, both sharing each tile); the registers left over (setmaxnreg.inc). Per K step: wait
                  "ready", issue the wgmma asynchronously, add the row sums from the same x tile in shared memory,
                  retire the previous wgmma (``warpgroup_mma_wait(1)``) and release its stage ("empty"). After
                  the last K step: retire the last wgmma, release its stage, and run the shared epilogue
                  (``_epilogue``: stats, scale, bias, async TMA store through one staging buffer).

    Ring protocol: both partitions count the CTA's K steps c over all its tiles in the same order; stage
    s = c % NUM_BUFFERS, phase p = (c // NUM_BUFFERS) & 1 (flips each time the ring wraps).
        ready[s]  count 1: the producer's ``mbarrier.expect`` is the one arrive; the phase completes when both
                  TMA loads have landed. The consumer waits parity p.
        empty[s]  count 1: the consumer arrives once per use of the stage (Gluon's ``mbarrier.arrive`` syncs the
                  partition's warps, then one thread arrives, so every warp's wgmma wait has passed). The producer
                  waits parity p ^ 1: a fresh mbarrier reports the phase before phase 0 as complete, so the first
                  round passes without an arrive.
        A stage is released only after the wgmma that read it has retired. The row sums read the x tile with
        generic-proxy loads, so before overwriting a stage by TMA (async proxy) the producer issues
        ``fence_async_shared`` after its "empty" wait (ROW_STATS only; the wgmma reads are async-proxy already).

    Registers: the launch caps the CTA with maxnreg so that (num_warps + 1 warps, rounded up to warpgroups) · 32
    threads · maxnreg fits the 64 K register file (8 + 1 warps → 168); the partitions then rebalance with
    setmaxnreg (producer PRODUCER_REGS, the consumer warpgroups the rest: 232 with 8 + 1 warps)."""
    x_desc, w_desc, out_desc = _descriptors(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_w, stride_om,
                                            BLOCK_M, BLOCK_N, BLOCK_K, W_KN)
    gl.static_assert(BLOCK_M == 16 * num_warps, "one wgmma row slab per consumer warp")
    gl.static_assert(NUM_BUFFERS >= 2, "the wgmma in flight and the one being issued")
    inv_k = inv_k.to(gl.float32)
    eps = eps.to(gl.float32)

    x_bufs, w_bufs, out_smem = _stage_buffers(x_desc, w_desc, out_desc, NUM_BUFFERS)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_BUFFERS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUFFERS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BUFFERS):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    fence_async_shared()  # the inits are visible to the TMA unit before the first expect / copy

    # (the argument tuples are written inline: a tuple assigned to a variable first would turn its constexprs
    # into runtime values in the partitions)
    gl.warp_specialize([
        (_ws_consumer, (x_ptr, x_bufs, w_bufs, ready, empty, out_desc, out_smem, bias_ptr, rstd_ptr, mean_ptr, u_ptr,
                        M, N, K, stride_xm, inv_k, eps, res_ptr, gamma_ptr, beta_ptr, z_ptr, res_out_ptr, stride_om,
                        ROW_STATS, ROW_SCALE, CENTER, HAS_BIAS, WRITE_STATS, GROUP_M, NUM_BUFFERS, num_warps, W_KN,
                        POST_NORM, STATS_OWN_BLOCK)),
        (_ws_producer, (x_desc, w_desc, x_bufs, w_bufs, ready, empty, M, N, K, ROW_STATS, GROUP_M, NUM_BUFFERS,
                        W_KN)),
    ], [1], [PRODUCER_REGS])
    for i in gl.static_range(NUM_BUFFERS):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


# BLOCK_M is 16 · num_warps (one wgmma slab per warp); BLOCK_N ≤ 256 (one wgmma wide). 128×256 with 3 stages was
# the fastest of these at every shape tried (docs/decisions.md#norm_gemm_gluonconfigs).
CONFIGS = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_BUFFERS=3, GROUP_M=8, num_warps=8),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, NUM_BUFFERS=4, GROUP_M=8, num_warps=8),
    dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, NUM_BUFFERS=4, GROUP_M=8, num_warps=4),
]

# norm_gemm_gluon_ws_kernel's configs (the cooperative ones of commit 63b7537's probe); their registers follow
# from num_warps (_ws_options). Both were right at every prologue and weight layout; the 128×256 one ran the
# in-loop prologue faster than CONFIGS[0] and is offered (OFFERED_WS), the 128×128 one was the slowest and is
# not. See docs/decisions.md#norm_gemm_gluonoffered_ws
WS_CONFIGS = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_BUFFERS=3, GROUP_M=8, num_warps=8, warp_specialize=True),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, NUM_BUFFERS=5, GROUP_M=8, num_warps=8, warp_specialize=True),
]
OFFERED_WS = WS_CONFIGS[:1]
# post-norm row plans offered (norm_gemm._post_plans): CONFIGS[0] and [2] were right on the H200 and
# CONFIGS[0] the fastest fused kernel at 3 of 16 shapes (gluon_probe.py --post; level with the unfused path
# there); the WS kernel's row epilogue was the slowest at every shape (1.3–1.65x the unfused time): not offered.
POST_CONFIGS = [CONFIGS[0], CONFIGS[2]]
WS_PRODUCER_REGS = 40  # the TMA warp needs few (setmaxnreg.dec)


def _ws_options(num_warps: int) -> dict:
    """The warp-specialized kernel's register split: the CTA's cap (maxnreg, a compile option) is what fits the
    64 K register file with num_warps + 1 warps rounded up to warpgroups (8 + 1 → 12 warps: 168), a multiple of 8
    as setmaxnreg needs; the producer then gives registers to the consumer warpgroups."""
    warps = 4 * triton.cdiv(num_warps + 1, 4)
    return dict(PRODUCER_REGS=WS_PRODUCER_REGS, maxnreg=min(65536 // (32 * warps) // 8 * 8, 255 // 8 * 8))

_GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}



def unsupported_reason(dtype: torch.dtype, device: torch.device, K: int, cfg: dict, prologue: str,
                       layer_norm: bool, w_kn: bool = False) -> str | None:
    """None if this mainloop can run the plan (prologue, cfg) on these operands, else why not."""
    if dtype not in _GL_DTYPES:
        return f"dtype {dtype} (the Gluon mainloop takes 16-bit inputs)"
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] != 9:
        return "the Gluon mainloop is written for sm_90 (wgmma)"
    # (the warp-specialized kernel has no fill to make, but was checked on the GPU only with K ≥ 256)
    if triton.cdiv(K, cfg["BLOCK_K"]) < cfg["NUM_BUFFERS"] - 1:
        return f"K={K} has fewer K steps than the pipeline's fill"
    if layer_norm and prologue == "in_loop" and K % cfg["BLOCK_K"]:
        return "the shifted LayerNorm sums need whole K tiles (zero padding would add −s)"
    return None


def post_unsupported_reason(dtype: torch.dtype, device: torch.device, M: int, K: int, N: int, cfg: dict,
                            w_kn: bool = False) -> str | None:
    """None if this mainloop can run the post-norm "row" epilogue (post_run) with ``cfg``, else why not: whole
    rows per tile (N ≤ BLOCK_N), on top of the mainloop's and the Triton post-norm's limits."""
    if N > cfg["BLOCK_N"]:
        return f"N={N} > BLOCK_N={cfg['BLOCK_N']}: the post-norm epilogue needs whole rows per tile"
    return (unsupported_reason(dtype, device, K, cfg, "plain", False, w_kn)
            or post_norm_unsupported_reason(dtype, K, N, M, device))


def post_run(cfg, x, w, out, z, mean, rstd, bias, residual, norm_weight, norm_bias, eps, layer_norm, w_kn=False,
             residual_out=None):
    """norm_gemm._run_post's "row" plan on this mainloop: out = norm(x wᵀ + bias + residual) · γ (+ β)
    (+ residual_out), z (if given) = x wᵀ + bias + residual, rstd and (LayerNorm) mean [M] fp32 of z's rows.
    Nothing is folded: γ, β and the residuals act on the GEMM's output."""
    assert out.shape[1] <= cfg["BLOCK_N"], "the row epilogue needs BLOCK_N >= N"
    assert rstd is not None and (mean is not None or not layer_norm), "the kernel always stores the statistics"
    launch(x, w, out, cfg, bias=bias, rstd=rstd, mean=mean if layer_norm else None, eps=eps, w_kn=w_kn,
           post_norm=LN_STATS if layer_norm else RMS_STATS, residual=residual, gamma=norm_weight, beta=norm_bias,
           z=z, residual_out=residual_out)


def run(prologue, cfg, x, w_eff, out, rstd, eps, bias=None, mean=None, w_kn=False):
    """One plan of norm_gemm's prologues on this mainloop (norm_gemm._run hands over the "gluon_*" plans): γ is
    already folded into ``w_eff`` [N, K] ([K, N] with ``w_kn``) and, for LayerNorm (``mean`` given), β into the
    fp32 ``bias``."""
    # u[n] = Σ_k W'[n, k], the column sums of the rounded W·γ the GEMM uses (the mean correction cancels against
    # exactly these): a sum over w_eff's K axis, 1 for [N, K], 0 for [K, N]
    u = w_eff.sum(0 if w_kn else 1, dtype=torch.float32) if mean is not None else None
    if prologue == "plain":
        launch(x, w_eff, out, cfg, bias=bias, w_kn=w_kn)
    elif prologue == "pre_pass":
        row_stats(x, rstd, mean, eps)
        launch(x, w_eff, out, cfg, row_scale=True, bias=bias, rstd=rstd, mean=mean, u=u, eps=eps, w_kn=w_kn)
    else:
        launch(x, w_eff, out, cfg, row_stats=LN_STATS if mean is not None else RMS_STATS, bias=bias, rstd=rstd,
               mean=mean, u=u, eps=eps, write_stats=rstd is not None, w_kn=w_kn)


def launch(x, w, out, cfg, *, row_stats=NO_STATS, row_scale=False, bias=None, rstd=None, mean=None, u=None,
           eps=0.0, write_stats=False, w_kn=False, post_norm=NO_STATS, residual=None, gamma=None, beta=None, z=None,
           residual_out=None):
    """out = epilogue(x @ wᵀ) with w [N, K], or epilogue(x @ w) with w [K, N] when ``w_kn`` (γ already folded
    in); see the module doc for the flags. ``post_norm`` (RMS_STATS / LN_STATS): the post-norm epilogue instead
    (post_run), with the [M, N] ``residual``, ``z``, ``residual_out`` and the norm's ``gamma``, ``beta``.

    While the pass traces a plan into the graph (fake tensors, ops.trace_direct_launch) this records the launch
    op below instead: Inductor cannot emit a Gluon kernel into its generated code, so the graph calls this thin
    op, and everything around the kernel (W·γ, u, v) stays in the graph for Inductor to compile."""
    args = (x, w, out, bias, rstd, mean, u, eps, row_stats, row_scale, write_stats, cfg["BLOCK_M"], cfg["BLOCK_N"],
            cfg["BLOCK_K"], cfg["NUM_BUFFERS"], cfg["GROUP_M"], cfg["num_warps"], int(cfg.get("warp_specialize", 0)),
            bool(w_kn), post_norm, residual, gamma, beta, z, residual_out)
    if traced(x) or _THROUGH_OP:
        torch.ops.norm_fusion.gluon_norm_gemm(*args)
    else:
        _launch_kernel(*args)


_THROUGH_OP = False


@contextlib.contextmanager
def through_op():
    """Eager launches go through the thin op, as the compiled graph makes them (the selection times its host
    cost this way)."""
    global _THROUGH_OP
    _THROUGH_OP = True
    try:
        yield
    finally:
        _THROUGH_OP = False


# The thin op is declared with torch.library's low-level API, a CUDA kernel and a fake and nothing else: the
# compiled graph calls it with grad off, and custom_op's Python autograd and ADInplaceOrView layers cost ~70 µs
# per call on the H200 host (benchmarks/diagnostics/host_profile.py), as much as the launch itself. Its inputs keep the
# layout Inductor gives them (flexible_layout, as ops.STREAM_INPUT_TAGS): with the default exact-stride
# constraint, Inductor copied an unrealized residual stream into the op.
_LIB = torch.library.Library("norm_fusion", "FRAGMENT")
_LIB.define("gluon_norm_gemm(Tensor x, Tensor w, Tensor(a!) out, Tensor? bias, Tensor(b!)? rstd, Tensor(c!)? mean, "
            "Tensor? u, float eps, int row_stats, bool row_scale, bool write_stats, int block_m, int block_n, "
            "int block_k, int num_buffers, int group_m, int num_warps, int warp_specialize=0, bool w_kn=False, "
            "int post_norm=0, Tensor? residual=None, Tensor? gamma=None, Tensor? beta=None, Tensor(d!)? z=None, "
            "Tensor? residual_out=None) -> ()", tags=(torch._C.Tag.flexible_layout,))


def _launch_kernel(x, w, out, bias, rstd, mean, u, eps, row_stats, row_scale, write_stats, bm, bn, bk, num_buffers,
                   group_m, num_warps, warp_specialize=0, w_kn=False, post_norm=0, residual=None, gamma=None,
                   beta=None, z=None, residual_out=None):
    M, K = x.shape
    N = w.shape[1] if w_kn else w.shape[0]  # w [K, N] or [N, K]; w.stride(0) is then its K or N stride
    _ensure_allocator()  # device-side descriptors live in Triton's global scratch (per thread)
    tensors = (x, w, out, *(t if t is not None else out for t in (bias, rstd, mean, u)))
    # the post-norm's operands are None when absent (the kernel tests for None; no parameter in the other
    # variants' PTX)
    post_tensors = (residual, gamma, beta, z, residual_out)
    meta = dict(ROW_STATS=row_stats, ROW_SCALE=row_scale, CENTER=mean is not None and not post_norm,
                HAS_BIAS=bias is not None, WRITE_STATS=write_stats, W_KN=bool(w_kn), POST_NORM=post_norm,
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m, NUM_BUFFERS=num_buffers, num_warps=num_warps,
                STATS_OWN_BLOCK=bool(row_stats) and tuning.current().gluon_stats_own_block)
    kernel = norm_gemm_gluon_kernel
    if warp_specialize:  # its extra meta (PRODUCER_REGS, maxnreg) also keeps its launch keys apart
        kernel = norm_gemm_gluon_ws_kernel
        meta |= _ws_options(num_warps)
    args = (*tensors, M, N, K, x.stride(0), w.stride(0), out.stride(0), 1.0 / K, eps, *post_tensors)

    def grid():  # persistent: one CTA per SM at most
        return (min(_num_sms(x.device.index or 0), triton.cdiv(M, bm) * triton.cdiv(N, bn)), 1, 1)

    _cached_launch(kernel, grid, args, meta, x.device)


_LIB.impl("gluon_norm_gemm", _launch_kernel, "CUDA")


@torch.library.register_fake("norm_fusion::gluon_norm_gemm", lib=_LIB)
def _(*args) -> None:
    return None
