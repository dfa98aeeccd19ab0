import sys
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from common import compile_and_report

M = gl.constexpr(64)
N = gl.constexpr(256)
# columns split across 2 CTAs: CTA bit 0 -> column offset N/2
L_SPLITN = gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0], cga_layout=[[0, 1]])
L_SPLITM = gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0], cga_layout=[[1, 0]])
L_BCAST = gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0], cga_layout=[[0, 0]])   # replicated in both CTAs

@gluon.jit
def rowsum_splitn_kernel(x_ptr, out_ptr, L: gl.constexpr):
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    x = gl.load(x_ptr + rm[:, None] * N + rn[None, :])
    s = gl.sum(x, axis=1)
    gl.store(out_ptr + rm, s)

@gluon.jit
def convert_splitn_to_bcast_kernel(x_ptr, out_ptr, LS: gl.constexpr, LD: gl.constexpr):
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, LS))
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, LS))
    x = gl.load(x_ptr + rm[:, None] * N + rn[None, :])
    y = gl.convert_layout(x, LD)
    s = gl.sum(y, axis=1)
    rm2 = gl.arange(0, M, layout=gl.SliceLayout(1, LD))
    gl.store(out_ptr + rm2, s)

@gluon.jit
def cid_kernel(out_ptr):
    pid = gl.program_id(0)
    gl.store(out_ptr + pid, gl.num_ctas())

sig2 = {"x_ptr": "*fp32", "out_ptr": "*fp32"}
opts = {"num_warps": 4, "num_ctas": 2}
compile_and_report("b_rowsum_splitN", rowsum_splitn_kernel, sig2, {"L": L_SPLITN}, opts, gluon=True)
compile_and_report("b_rowsum_splitM", rowsum_splitn_kernel, sig2, {"L": L_SPLITM}, opts, gluon=True)
compile_and_report("b_convert_splitN_to_bcast", convert_splitn_to_bcast_kernel, sig2, {"LS": L_SPLITN, "LD": L_BCAST}, opts, gluon=True)
compile_and_report("b_convert_splitN_to_splitM", convert_splitn_to_bcast_kernel, sig2, {"LS": L_SPLITN, "LD": L_SPLITM}, opts, gluon=True)
compile_and_report("b_cid", cid_kernel, {"out_ptr": "*i32"}, {}, opts, gluon=True)
