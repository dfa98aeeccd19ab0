from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import hopper
from common import compile_and_report
BM = gl.constexpr(64); BN = gl.constexpr(256); BK = gl.constexpr(64); H = gl.constexpr(128)
# accumulator [BM, BN]: N split over the 2 CTAs (each CTA runs a 64x128 wgmma)
ACC = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16], cga_layout=[[0, 1]]))
LA = gl.constexpr(gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0], cga_layout=[[0, 0]]))   # A replicated in both CTAs
LB = gl.constexpr(gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0], cga_layout=[[0, 1]]))  # B split along N
SA = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, cga_layout=[[0, 0]]))
SB = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, cga_layout=[[0, 1]]))
L2 = gl.constexpr(gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0], cga_layout=[[0, 1]]))
LR = gl.constexpr(gl.BlockedLayout([1, 1], [1, 32], [1, 4], [1, 0], cga_layout=[[0, 0]]))

@gluon.jit
def cluster_sync():
    gl.inline_asm_elementwise("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n\tmov.u32 $0, 0;",
                              "=r", [], dtype=gl.int32, is_pure=False, pack=1)

@gluon.jit
def mm_ln_cluster_kernel(a_ptr, b_ptr, y_ptr, scratch_ptr, K, eps):
    pid = gl.program_id(0)
    am = gl.arange(0, BM, layout=gl.SliceLayout(1, LA)); ak = gl.arange(0, BK, layout=gl.SliceLayout(0, LA))
    bk = gl.arange(0, BK, layout=gl.SliceLayout(1, LB)); bn = gl.arange(0, BN, layout=gl.SliceLayout(0, LB))
    a_s = gl.allocate_shared_memory(gl.float16, [BM, BK], SA)
    b_s = gl.allocate_shared_memory(gl.float16, [BK, BN], SB)
    acc = gl.zeros([BM, BN], gl.float32, ACC)
    for k in range(0, K, BK):
        a = gl.load(a_ptr + (pid * BM + am)[:, None] * K + (k + ak)[None, :])
        b = gl.load(b_ptr + (k + bk)[:, None] * BN + bn[None, :])
        a_s.store(a); b_s.store(b)
        hopper.fence_async_shared()
        acc = hopper.warpgroup_mma(a_s, b_s, acc)
    z = gl.convert_layout(acc, L2)                       # same CGA split -> intra-CTA conversion
    z3 = gl.reshape(z, [BM, 2, H])
    p1 = gl.sum(z3, axis=2); p2 = gl.sum(z3 * z3, axis=2)
    PL: gl.constexpr = p1.type.layout
    pm = gl.arange(0, BM, layout=gl.SliceLayout(1, PL)); pc = gl.arange(0, 2, layout=gl.SliceLayout(0, PL))
    poff = pid * (4 * BM) + pc[None, :] * BM + pm[:, None]
    gl.store(scratch_ptr + poff, p1); gl.store(scratch_ptr + 2 * BM + poff, p2)
    cluster_sync()
    qc = gl.arange(0, 2, layout=gl.SliceLayout(1, LR)); qm = gl.arange(0, BM, layout=gl.SliceLayout(0, LR))
    qoff = pid * (4 * BM) + qc[:, None] * BM + qm[None, :]
    s1 = gl.sum(gl.load(scratch_ptr + qoff), axis=0); s2 = gl.sum(gl.load(scratch_ptr + 2 * BM + qoff), axis=0)
    mean = s1 / BN
    rstd = gl.rsqrt(s2 / BN - mean * mean + eps)
    mean = gl.convert_layout(mean, gl.SliceLayout(1, L2)); rstd = gl.convert_layout(rstd, gl.SliceLayout(1, L2))
    y = (z - mean[:, None]) * rstd[:, None]
    rm = gl.arange(0, BM, layout=gl.SliceLayout(1, L2)); rn = gl.arange(0, BN, layout=gl.SliceLayout(0, L2))
    gl.store(y_ptr + (pid * BM + rm)[:, None] * BN + rn[None, :], y.to(gl.float16))

compile_and_report("e_mm_ln_cluster", mm_ln_cluster_kernel,
    {"a_ptr": "*fp16", "b_ptr": "*fp16", "y_ptr": "*fp16", "scratch_ptr": "*fp32", "K": "i32", "eps": "fp32"}, {}, {"num_warps": 4, "num_ctas": 2}, gluon=True)
