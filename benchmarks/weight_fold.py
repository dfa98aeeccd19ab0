"""The regrouped consumers' weight fold per call (W' = W·γ, u = Σ_k W', v = Wβ + b): ``kernels.weight_fold`` (one
pass over W) against the same operands in torch ops compiled by Inductor (the fold and v fused, u an opaque op)
and against a copy of W by the SMs (the pass's bytes at the copy's rate: its speed-of-light here).

    python benchmarks/weight_fold.py            # bf16, LayerNorm (u, v) and RMSNorm (W' alone) consumers
"""

from __future__ import annotations

import argparse
import functools

import torch
import triton

from norm_fusion_inductor import regrouped
from norm_fusion_inductor.timing import interleaved_medians, sm_copy

# (name, N, K, w_kn, gated): the consumers of the benchmarks' blocks
SHAPES = [("gpt2-medium fc", 4096, 1024, True, False), ("gpt2-medium qkv", 3072, 1024, True, False),
          ("bert-base intermediate", 3072, 768, False, False), ("llama-3-8b qkv", 6144, 4096, False, False),
          ("llama-3-8b gate+up", 14336, 4096, False, True), ("recsys tower", 2048, 1024, False, False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    dtype = torch.bfloat16
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, bf16; "
          f"do_bench_cudagraph medians, {args.rounds} interleaved rounds")
    print("| consumer | N×K | norm | kernel ms | Inductor ms | copy of W ms | kernel GB/s | vs Inductor | vs copy |")
    print("|---|---|---|---|---|---|---|---|---|")
    # GPU time under a CUDA graph: the passes are a few microseconds, shorter than an eager call's host time (in
    # a compiled graph Inductor's generated code launches either)
    time_one = functools.partial(triton.testing.do_bench_cudagraph, rep=20, return_mode="median")
    for name, N, K, w_kn, gated in SHAPES:
        for norm in ("ln", "rms"):
            torch.manual_seed(0)
            shape = (K, N) if w_kn else (N, K)
            w0 = torch.randn(shape, device="cuda", dtype=dtype)
            w1 = torch.randn(shape, device="cuda", dtype=dtype) if gated else None
            gamma = torch.rand(K, device="cuda") + 0.5
            beta = torch.randn(K, device="cuda") if norm == "ln" else None
            bias = torch.randn(N, device="cuda", dtype=dtype) if norm == "ln" and not gated else None
            operands = (w0, w1, gamma, beta, bias, None, w_kn, norm == "ln")
            compiled = torch.compile(regrouped.fold_with_torch_ops, fullgraph=True)
            got, ref = regrouped.fold_with_kernel(*operands), compiled(*operands)
            assert torch.equal(got[0], ref[0]), name
            for x, y in zip(got[1:], ref[1:]):
                assert (x is None) == (y is None) and (x is None or (x - y).norm() / y.norm() < 1e-5), name
            src = torch.cat([w0.reshape(-1), w1.reshape(-1)]) if gated else w0.reshape(-1)
            dst = torch.empty_like(src)
            ms = interleaved_medians({"kernel": lambda: regrouped.fold_with_kernel(*operands),
                                      "inductor": lambda: compiled(*operands),
                                      "copy": lambda: sm_copy(dst, src)}, args.rounds, time_one)
            moved = 2 * src.numel() * src.element_size()
            print(f"| {name} | {N * (2 if gated else 1)}×{K} | {norm} | {ms['kernel']:.4f} | {ms['inductor']:.4f} | "
                  f"{ms['copy']:.4f} | {moved / ms['kernel'] / 1e6:.0f} | {ms['inductor'] / ms['kernel']:.2f}× | "
                  f"{ms['copy'] / ms['kernel']:.2f}× |")


if __name__ == "__main__":
    main()
