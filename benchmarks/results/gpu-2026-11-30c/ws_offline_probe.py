"""Offline (CPU) check of when Triton 3.6 warp-specializes a persistent TMA matmul for sm_90: prints the
number of ttg.warp_specialize ops per (loop, warp_specialize, flatten, num_warps). 2026-11-30."""
import triton, triton.language as tl, re, sys
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
       NUM_SMS: tl.constexpr, WS: tl.constexpr, FLAT: tl.constexpr, OUTER: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid = tl.program_id(0)
    npm = tl.cdiv(M, BLOCK_M); npn = tl.cdiv(N, BLOCK_N); kt = tl.cdiv(K, BLOCK_K)
    if OUTER:
        for t in tl.range(pid, npm * npn, NUM_SMS, flatten=FLAT, warp_specialize=WS):
            pm = t // npn; pn = t % npn
            acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            for ki in range(kt):
                a = a_desc.load([pm * BLOCK_M, ki * BLOCK_K]); b = b_desc.load([pn * BLOCK_N, ki * BLOCK_K])
                acc = tl.dot(a, b.T, acc)
            c_desc.store([pm * BLOCK_M, pn * BLOCK_N], acc.to(tl.bfloat16))
    else:
        for t in range(pid, npm * npn, NUM_SMS):
            pm = t // npn; pn = t % npn
            acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            for ki in tl.range(kt, warp_specialize=WS):
                a = a_desc.load([pm * BLOCK_M, ki * BLOCK_K]); b = b_desc.load([pn * BLOCK_N, ki * BLOCK_K])
                acc = tl.dot(a, b.T, acc)
            c_desc.store([pm * BLOCK_M, pn * BLOCK_N], acc.to(tl.bfloat16))

sig = dict(a_ptr="*bf16", b_ptr="*bf16", c_ptr="*bf16", M="i32", N="i32", K="i32",
           **{n: "constexpr" for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "NUM_SMS", "WS", "FLAT", "OUTER")})
for outer in (True, False):
  for ws in (False, True):
    for flat in ((False, True) if outer else (False,)):
      for nw in (4, 8):
        ce = {(6,): 128, (7,): 256 if nw == 8 else 128, (8,): 64, (9,): 132, (10,): ws, (11,): flat, (12,): outer}
        try:
            attrs = {(i,): [["tt.divisibility", 16]] for i in range(6)}
            k = triton.compile(ASTSource(fn=mm, signature=sig, constexprs=ce, attrs=attrs),
                               target=GPUTarget("cuda", 90, 32), options=dict(num_warps=nw, num_stages=3))
            g = k.asm["ttgir"]
            print("outer" if outer else "inner", "ws" if ws else "--", "flat" if flat else "    ", nw,
                  "warp_specialize ops:", g.count("ttg.warp_specialize"), "smem", k.metadata.shared,
                  "num_warps", k.metadata.num_warps)
        except Exception as e:
            print(outer, ws, flat, nw, "FAIL", str(e).splitlines()[0][:200])
