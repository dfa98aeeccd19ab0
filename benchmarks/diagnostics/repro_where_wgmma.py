"""A standalone reproducer candidate for the Triton 3.6 sm_90 miscompile behind the in-loop LayerNorm (issue 3):
a `tl.where` on the A tile of a register-A wgmma in a persistent TMA loop. No project imports, so it can go to
Triton's issue tracker as is once it reproduces on the GPU (not run yet: written after the session's last device
call, checked in the interpreter).

    out = Σ_k where(k < K, x − s, 0)·γ  Wᵀ  (+ row sums of the same tile, as the LayerNorm kernel keeps them)

against float64, with and without the where, in the two block configs that failed in `ln_inloop_probe.py`
(BLOCK_N 256 / BLOCK_K 64 / 8 warps / unflattened; BLOCK_N 128 / BLOCK_K 128 / 8 warps) and one that passed.

    python benchmarks/diagnostics/repro_where_wgmma.py
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, w_ptr, g_ptr, out_ptr, sums_ptr, M, N, K, WHERE: tl.constexpr, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * num_pid_n
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=FLATTEN):
        off_m = (tile // num_pid_n) * BLOCK_M
        off_n = (tile % num_pid_n) * BLOCK_N
        offs_m = off_m + tl.arange(0, BLOCK_M)
        shift = tl.load(x_ptr + offs_m * K, mask=offs_m < M, other=0.0).to(tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        sums = tl.zeros((BLOCK_M, BLOCK_K), tl.float32)
        for ki in range(tl.cdiv(K, BLOCK_K)):
            offs_k = ki * BLOCK_K + tl.arange(0, BLOCK_K)
            a32 = x_desc.load([off_m, ki * BLOCK_K]).to(tl.float32) - shift[:, None]
            if WHERE:
                a32 = tl.where(offs_k[None, :] < K, a32, 0.0)
            sums += a32
            g = tl.load(g_ptr + offs_k, mask=offs_k < K, other=0.0).to(tl.float32)
            a = (a32 * g[None, :]).to(x_ptr.dtype.element_ty)
            acc = tl.dot(a, w_desc.load([off_n, ki * BLOCK_K]).T, acc)
        o_desc.store([off_m, off_n], acc.to(out_ptr.dtype.element_ty))
        if off_n == 0:
            tl.store(sums_ptr + offs_m, tl.sum(sums, axis=1), mask=offs_m < M)


def main():
    interpret = not torch.cuda.is_available()
    device = "cpu" if interpret else "cuda"
    dtype = torch.float16 if interpret else torch.bfloat16  # the 3.6 interpreter's bf16 dots are wrong
    M, K, N = (64, 128, 64) if interpret else (4096, 1024, 768)
    configs = [(16, 16, 32, 1, False)] if interpret else [
        (128, 256, 64, 8, False), (128, 128, 128, 8, False), (128, 128, 64, 4, True)]
    if not interpret:
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    torch.manual_seed(0)
    x = (torch.randn(M, K, device=device) + 0.5).to(dtype)
    w = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
    g = (torch.rand(K, device=device) + 0.5).to(dtype)
    xs = x.double() - x[:, :1].double()
    ref = (xs * g.double()) @ w.double().t()
    num_sms = 4 if interpret else torch.cuda.get_device_properties(0).multi_processor_count
    for bm, bn, bk, warps, flatten in configs:
        for where in (True, False):
            out = torch.full((M, N), float("nan"), device=device, dtype=dtype)
            sums = torch.full((M,), float("nan"), device=device)
            grid = (min(num_sms, triton.cdiv(M, bm) * triton.cdiv(N, bn)),)
            _kernel[grid](x, w, g, out, sums, M, N, K, WHERE=where, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                          NUM_SMS=grid[0], FLATTEN=flatten, num_warps=warps, num_stages=3 if not interpret else 1)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            sums_err = ((sums.double() - xs.sum(1)).norm() / xs.sum(1).norm()).item()
            print(f"BLOCK_N {bn} BLOCK_K {bk} warps {warps} flatten {flatten} where {where}: out {err:.1e} "
                  f"row sums {sums_err:.1e}", flush=True)


if __name__ == "__main__":
    main()
