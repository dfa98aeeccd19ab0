import triton, triton.language as tl
from common import compile_and_report
@triton.jit
def dot_ln_reshape_kernel(a_ptr, b_ptr, c_ptr, s_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM); rn = tl.arange(0, BN); rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    c = tl.dot(a, b)
    p = tl.sum(tl.reshape(c, [BM, 2, BN // 2]), axis=2)     # [BM, 2] partials
    tl.store(s_ptr + rm[:, None] * 2 + tl.arange(0, 2)[None, :], p)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], c)
compile_and_report("f_plain_reshape_ctas2", dot_ln_reshape_kernel, {"a_ptr":"*fp16","b_ptr":"*fp16","c_ptr":"*fp32","s_ptr":"*fp32"}, {"BM":128,"BN":256,"BK":64}, {"num_warps":4,"num_ctas":2})
