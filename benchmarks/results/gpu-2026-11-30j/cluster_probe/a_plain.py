import triton, triton.language as tl
from common import compile_and_report
@triton.jit
def rowsum_kernel(x_ptr, out_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.arange(0, BLOCK_M); rn = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + rm[:, None] * BLOCK_N + rn[None, :])
    s = tl.sum(x, axis=1)
    tl.store(out_ptr + rm, s)
@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM); rn = tl.arange(0, BN); rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    c = tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], c)
@triton.jit
def dot_ln_kernel(a_ptr, b_ptr, c_ptr, s_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM); rn = tl.arange(0, BN); rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    c = tl.dot(a, b)
    mean = tl.sum(c, axis=1) / BN
    tl.store(s_ptr + rm, mean)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], c - mean[:, None])
for nc in (1, 2, 4):
    compile_and_report(f"a_rowsum_ctas{nc}", rowsum_kernel, {"x_ptr":"*fp32","out_ptr":"*fp32"}, {"BLOCK_M":64,"BLOCK_N":256}, {"num_warps":4,"num_ctas":nc})
for nc in (1, 2):
    compile_and_report(f"a_dot_ctas{nc}", dot_kernel, {"a_ptr":"*fp16","b_ptr":"*fp16","c_ptr":"*fp32"}, {"BM":128,"BN":256,"BK":64}, {"num_warps":4,"num_ctas":nc})
    compile_and_report(f"a_dotln_ctas{nc}", dot_ln_kernel, {"a_ptr":"*fp16","b_ptr":"*fp16","c_ptr":"*fp32","s_ptr":"*fp32"}, {"BM":128,"BN":256,"BK":64}, {"num_warps":4,"num_ctas":nc})
