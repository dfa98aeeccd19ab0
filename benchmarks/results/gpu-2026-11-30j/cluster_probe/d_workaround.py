import sys
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from common import compile_and_report
M = gl.constexpr(64)
H = gl.constexpr(128)            # columns owned by each CTA; the row block has 2*H columns
# [BM, BN] tile, N split across the 2 CTAs of the cluster (like a wgmma accumulator with CGALayout [[0,1]])
L2 = gl.constexpr(gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0], cga_layout=[[0, 1]]))
# [2, BM] partial stats replicated in both CTAs
LR = gl.constexpr(gl.BlockedLayout([1, 1], [1, 32], [1, 4], [1, 0], cga_layout=[[0, 0]]))

@gluon.jit
def cluster_sync():
    # barrier.cluster with release/acquire semantics: orders the global stores before it
    # against the loads after it, for all threads of all CTAs of the cluster
    gl.inline_asm_elementwise("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n\tmov.u32 $0, 0;",
                              "=r", [], dtype=gl.int32, is_pure=False, pack=1)

@gluon.jit
def ln_rows_cluster_kernel(x_ptr, y_ptr, scratch_ptr, eps):
    pid = gl.program_id(0)          # = %clusterid.x: one cluster per row block
    N: gl.constexpr = 2 * H
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, L2))
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, L2))
    offs = (pid * M + rm)[:, None] * N + rn[None, :]
    z = gl.load(x_ptr + offs)                       # [M, N]; CTA r holds columns r*H .. r*H+H-1
    z3 = gl.reshape(z, [M, 2, H])                   # expose the CTA split as dim 1
    p1 = gl.sum(z3, axis=2)                         # [M, 2]: per-CTA partial row sums (within-CTA reduce)
    p2 = gl.sum(z3 * z3, axis=2)
    # publish partials to global scratch[pid, {0,1}, cta, m]
    PL: gl.constexpr = p1.type.layout
    pm = gl.arange(0, M, layout=gl.SliceLayout(1, PL))
    pc = gl.arange(0, 2, layout=gl.SliceLayout(0, PL))
    poff = pid * (4 * M) + pc[None, :] * M + pm[:, None]
    gl.store(scratch_ptr + poff, p1)
    gl.store(scratch_ptr + 2 * M + poff, p2)
    cluster_sync()
    # every CTA reads both CTAs' partials
    qc = gl.arange(0, 2, layout=gl.SliceLayout(1, LR))
    qm = gl.arange(0, M, layout=gl.SliceLayout(0, LR))
    qoff = pid * (4 * M) + qc[:, None] * M + qm[None, :]
    s1 = gl.sum(gl.load(scratch_ptr + qoff), axis=0)          # [M], replicated in both CTAs
    s2 = gl.sum(gl.load(scratch_ptr + 2 * M + qoff), axis=0)
    mean = s1 / N
    rstd = gl.rsqrt(s2 / N - mean * mean + eps)
    mean = gl.convert_layout(mean, gl.SliceLayout(1, L2))
    rstd = gl.convert_layout(rstd, gl.SliceLayout(1, L2))
    y = (z - mean[:, None]) * rstd[:, None]
    gl.store(y_ptr + offs, y)

compile_and_report("d_ln_rows_cluster", ln_rows_cluster_kernel,
                   {"x_ptr": "*fp32", "y_ptr": "*fp32", "scratch_ptr": "*fp32", "eps": "fp32"}, {}, {"num_warps": 4, "num_ctas": 2}, gluon=True)
