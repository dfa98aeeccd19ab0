import sys
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import hopper
from triton.experimental.gluon.language.nvidia.hopper import mbarrier
from common import compile_and_report
M = gl.constexpr(64)
L1 = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0], cga_layout=[[0]]))
LS = gl.constexpr(gl.BlockedLayout([1, 1], [1, 32], [1, 4], [1, 0], cga_layout=[[1, 0]]))
LR = gl.constexpr(gl.BlockedLayout([1, 1], [1, 32], [1, 4], [1, 0], cga_layout=[[0, 0]]))
SL = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0], cga_layout=[[1, 0]]))
H = gl.constexpr(128)   # columns per CTA

@gluon.jit
def cta_rank():
    # %cluster_ctarank via inline PTX (no Gluon builtin for it)
    return gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)

@gluon.jit
def noncga_store_kernel(out_ptr):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])     # no cga_layout with num_ctas=2
    r = gl.arange(0, 128, layout=L)
    gl.store(out_ptr + r, r)

@gluon.jit
def rank_kernel(out_ptr):
    L: gl.constexpr = L1
    r = gl.arange(0, 128, layout=L)
    rank = gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r,r", [r], dtype=gl.int32, is_pure=True, pack=1)
    gl.store(out_ptr + r, rank)

@gluon.jit
def cluster_barrier_kernel(out_ptr):
    L: gl.constexpr = L1
    r = gl.arange(0, 128, layout=L)
    gl.store(out_ptr + r, r)
    # cluster-wide barrier with release/acquire (orders global memory too)
    t = gl.inline_asm_elementwise("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned; mov.u32 $0, $1;", "=r,r", [r], dtype=gl.int32, is_pure=False, pack=1)
    gl.store(out_ptr + 128 + r, t)

@gluon.jit
def fence_cluster_kernel(out_ptr):
    L: gl.constexpr = L1
    r = gl.arange(0, 128, layout=L)
    hopper.fence_async_shared(cluster=True)
    gl.store(out_ptr + r, r)

@gluon.jit
def cluster_mbarrier_kernel(out_ptr, BL: gl.constexpr):
    L: gl.constexpr = L1
    r = gl.arange(0, 128, layout=L)
    bar = gl.allocate_shared_memory(gl.int64, [1], BL)
    mbarrier.init(bar, count=1)
    mbarrier.arrive(bar)
    mbarrier.wait(bar, 0)
    gl.store(out_ptr + r, r)

# partials with an explicit CTA dim: [2, M] with dim 0 split across CTAs -> replicated in all CTAs
@gluon.jit
def partial_convert_kernel(x_ptr, out_ptr):
    c = gl.arange(0, 2, layout=gl.SliceLayout(1, LS))
    m = gl.arange(0, M, layout=gl.SliceLayout(0, LS))
    p = gl.load(x_ptr + c[:, None] * M + m[None, :])
    q = gl.convert_layout(p, LR)
    s = gl.sum(q, axis=0)
    m2 = gl.arange(0, M, layout=gl.SliceLayout(0, LR))
    gl.store(out_ptr + m2, s)

# shared-memory route: store split partials to smem with split cga, load with replicated cga
@gluon.jit
def partial_smem_kernel(x_ptr, out_ptr):
    c = gl.arange(0, 2, layout=gl.SliceLayout(1, LS))
    m = gl.arange(0, M, layout=gl.SliceLayout(0, LS))
    p = gl.load(x_ptr + c[:, None] * M + m[None, :])
    buf = gl.allocate_shared_memory(gl.float32, [2, M], SL, p)
    q = buf.load(LR)
    s = gl.sum(q, axis=0)
    m2 = gl.arange(0, M, layout=gl.SliceLayout(0, LR))
    gl.store(out_ptr + m2, s)

o = {"num_warps": 4, "num_ctas": 2}
if sys.argv[1] == "c_noncga_store": compile_and_report("c_noncga_store", noncga_store_kernel, {"out_ptr": "*i32"}, {}, o, gluon=True)
if sys.argv[1] == "c_rank_asm": compile_and_report("c_rank_asm", rank_kernel, {"out_ptr": "*i32"}, {}, o, gluon=True)
if sys.argv[1] == "c_cluster_barrier_asm": compile_and_report("c_cluster_barrier_asm", cluster_barrier_kernel, {"out_ptr": "*i32"}, {}, o, gluon=True)
if sys.argv[1] == "c_fence_cluster": compile_and_report("c_fence_cluster", fence_cluster_kernel, {"out_ptr": "*i32"}, {}, o, gluon=True)
if sys.argv[1] == "c_mbarrier_local": compile_and_report("c_mbarrier_local", cluster_mbarrier_kernel, {"out_ptr": "*i32"}, {"BL": mbarrier.MBarrierLayout()}, o, gluon=True)
if sys.argv[1] == "c_mbarrier_cga_split": compile_and_report("c_mbarrier_cga_split", cluster_mbarrier_kernel, {"out_ptr": "*i32"}, {"BL": mbarrier.MBarrierLayout(cga_layout=[[1]])}, {"num_warps": 4, "num_ctas": 2}, gluon=True)
if sys.argv[1] == "c_mbarrier_cga_bcast": compile_and_report("c_mbarrier_cga_bcast", cluster_mbarrier_kernel, {"out_ptr": "*i32"}, {"BL": mbarrier.MBarrierLayout(cga_layout=[[0]])}, o, gluon=True)
if sys.argv[1] == "c_partial_convert": compile_and_report("c_partial_convert", partial_convert_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32"}, {}, o, gluon=True)
if sys.argv[1] == "c_partial_smem": compile_and_report("c_partial_smem", partial_smem_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32"}, {}, o, gluon=True)
