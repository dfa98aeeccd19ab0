"""norm → attention → norm (FlashNormAttention) on the GPU: the fused op against torch.compile of the eager block
(default, max-autotune), forward and forward + backward, side by side in one run.

The reference shape (issue 6): batch 768, head_dim 128, KV length 128, jagged q whose lengths are uniform in
[1, max] (mean ≈ max/2), max ∈ {512, 1024, 2048}, heads ∈ {2, 4}. The eager block needs dense tensors, so its
baselines run on q padded to [B, max, H·D] (what a model without jagged kernels computes); "fused dense" runs
the op on the same padded tensor, the like-for-like kernel comparison.

    python3 benchmarks/attention.py --json out.json [--activations softmax silu] [--heads 2 4] [--max-lens 512]
"""

from __future__ import annotations

import argparse
import json

import torch
import triton

from norm_fusion_inductor import attention_ops
from norm_fusion_inductor.kernels import tuning
from norm_fusion_inductor.timing import interleaved_medians

op = torch.ops.norm_fusion.norm_attention


DENSE = False  # --dense: every sequence max_len long (the end-to-end recommendation block's shape)
FROZEN_KV = False  # --frozen-kv: k and v need no gradient


def _operands(batch, max_len, heads, head_dim, kv_len, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    lens = torch.randint(1, max_len + 1, (batch,), generator=g, device="cuda")
    if DENSE:
        lens = torch.full_like(lens, max_len)
    offsets = torch.zeros(batch + 1, dtype=torch.int32, device="cuda")
    offsets[1:] = lens.cumsum(0)
    width = heads * head_dim

    def rand(*shape, std=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, device="cuda") * std + shift).to(torch.bfloat16)

    q = rand(int(offsets[-1]), width, shift=0.3)
    k, v = rand(batch, kv_len, width), rand(batch, kv_len, width)
    weights = rand(width, std=0.1, shift=1.0), rand(width, std=0.1), rand(width, std=0.1, shift=1.0)
    return q, k, v, offsets, weights


def _kernel_args(batch, max_len, heads, head_dim, kv_len, activation) -> tuple:
    """The arguments ``kernels.forward`` and ``kernels.backward`` share, on ``_operands``."""
    q, k, v, offsets, (ln_w, ln_b, rms_w) = _operands(batch, max_len, heads, head_dim, kv_len)
    scale = head_dim ** -0.5 if activation == "softmax" else 1.0 / kv_len
    return q, k, v, offsets, max_len, heads, ln_w, ln_b, rms_w, scale, activation


def bench_interleaved(fns: dict, rounds=3, rep=30):
    """Median ms of each fn over ``rounds`` rounds (norm_fusion_inductor.timing: interleaved, the order reversed
    every other round)."""
    return interleaved_medians(fns, rounds,
                               lambda fn: triton.testing.do_bench(fn, warmup=5, rep=rep, return_mode="median"))


def run_shape(batch, max_len, heads, head_dim, kv_len, activation, modes, train):
    # every row compiles the same block function again: past Dynamo's recompile limit (8) it would silently run
    # the block eagerly (it did on 2026-11-30: the silu rows of a 16-row sweep)
    torch._dynamo.reset()
    q, k, v, offsets, (ln_w, ln_b, rms_w) = _operands(batch, max_len, heads, head_dim, kv_len)
    scale = head_dim ** -0.5 if activation == "softmax" else 1.0 / kv_len
    seq, pos = attention_ops.padding_index(offsets, q.shape[0])
    padded = q.new_zeros(batch, max_len, q.shape[1]).index_put((seq, pos), q)
    dense_offsets = torch.arange(0, (batch + 1) * max_len, max_len, device="cuda", dtype=torch.int32)
    params = [t.requires_grad_(train) for t in (ln_w, ln_b, rms_w, *(() if FROZEN_KV else (k, v)))]
    for t in (q, padded):
        t.requires_grad_(train)

    def block(x):
        return attention_ops.norm_attention_block(x, k, v, heads, ln_w, ln_b, rms_w, scale, activation)

    def fused(x, offs, length):
        return op(x, k, v, offs, length, heads, ln_w, ln_b, rms_w, scale, activation, 1e-5, 1e-6)[0]

    cases = {"fused jagged": (lambda: fused(q, offsets, max_len), q),
             "fused dense": (lambda: fused(padded.view(-1, q.shape[1]), dense_offsets, max_len), padded)}
    for mode in modes:
        compiled = torch.compile(block, mode=None if mode == "default" else mode, dynamic=False)
        cases[f"compile {mode}"] = (lambda c=compiled: c(padded), padded)
    fns = {name: fn for name, (fn, _) in cases.items()}
    if train:
        def step(fn, x):
            grad = torch.randn_like(fn())
            return lambda: torch.autograd.grad(fn(), [x, *params], grad)

        fns = {name: step(fn, x) for name, (fn, x) in cases.items()}
    for fn in fns.values():  # compile and warm up outside the timing
        fn()
    torch.cuda.synchronize()
    times = bench_interleaved(fns)
    # correctness on the same operands: fused jagged against the compiled block's rows (bf16 vs bf16)
    with torch.no_grad():
        err = ((fused(q, offsets, max_len).float() - block(padded)[seq, pos].float()).norm()
               / block(padded)[seq, pos].float().norm()).item()
    return dict(batch=batch, max_len=max_len, heads=heads, head_dim=head_dim, kv_len=kv_len,
                activation=activation, train=train, rows=q.shape[0], times_ms=times, err_vs_eager=err)


CONFIGS = [(64, 64, 4, 2), (64, 64, 8, 2), (128, 64, 8, 2), (64, 128, 8, 2), (32, 64, 4, 2), (128, 128, 8, 2),
           (64, 64, 4, 3), (64, 32, 4, 2)]
PROBE_CONFIGS = [(32, 64, 4, 2), (64, 64, 4, 2), (64, 64, 8, 2)]


def explore_configs(batch, max_len, heads, head_dim, kv_len, activation, tma_too=False):
    """The forward and the backward, timed with each (BLOCK_M, BLOCK_N, warps, stages) of CONFIGS for one of
    their per-head kernels (the others at their defaults), on the jagged operands; the pointer path, and with
    ``tma_too`` the descriptor path as well."""
    from norm_fusion_inductor.kernels import norm_attention as kernels

    common = _kernel_args(batch, max_len, heads, head_dim, kv_len, activation)
    q = common[0]
    _, *saved = kernels.forward(*common, 1e-5, 1e-6)
    grad = torch.randn_like(q)
    for cfg in CONFIGS:
        for tma in (False, True) if tma_too else (False,):
            row = {}
            for name, fn in (("forward", lambda: kernels.forward(*common, 1e-5, 1e-6, config=cfg, tma=tma)),
                             ("backward dq", lambda: kernels.backward(grad, *common, *saved, dq_config=cfg,
                                                                      tma=tma, merged=False,
                                                                      kv_grad=not FROZEN_KV)),
                             ("backward dkdv", lambda: kernels.backward(grad, *common, *saved, dkdv_config=cfg,
                                                                        tma=tma, merged=False))):
                try:
                    row[name] = triton.testing.do_bench(fn, warmup=3, rep=20, return_mode="median")
                except Exception as e:  # out of shared memory or registers: reported, not fatal
                    row[name] = f"{type(e).__name__}"
            print(f"config {cfg} tma={tma} {activation} H{heads} max{max_len}: "
                  + ", ".join(f"{n} {t:.3f}" if isinstance(t, float) else f"{n} {t}" for n, t in row.items()),
                  flush=True)


def _compiled_kernels(fn) -> dict:
    """{cache key: CompiledKernel} of a @triton.jit function, across devices (Triton 3.6 internals)."""
    found = {}
    for cache in getattr(fn, "device_caches", {}).values():
        found.update(cache[0])
    return found


def probe(batch, max_len, heads, head_dim, kv_len, activation):
    """Registers, spills and shared memory of each kernel at each config of PROBE_CONFIGS, with its time: why
    the kernels run as they do."""
    from norm_fusion_inductor.kernels import norm_attention as kernels

    common = _kernel_args(batch, max_len, heads, head_dim, kv_len, activation)
    q = common[0]
    _, *saved = kernels.forward(*common, 1e-5, 1e-6)
    grad = torch.randn_like(q)
    launches = {"_attention_kernel": lambda c, t: kernels.forward(*common, 1e-5, 1e-6, config=c, tma=t),
                "_dq_hat_kernel": lambda c, t: kernels.backward(grad, *common, *saved, dq_config=c, tma=t,
                                                                merged=False),
                "_dkdv_kernel": lambda c, t: kernels.backward(grad, *common, *saved, dkdv_config=c, tma=t,
                                                              merged=False)}
    for name, launch in launches.items():
        jit_fn = getattr(kernels, name)
        for cfg, tma in ((c, t) for c in PROBE_CONFIGS for t in (False, True)):
            seen = set(_compiled_kernels(jit_fn))
            try:
                ms = triton.testing.do_bench(lambda: launch(cfg, tma), warmup=3, rep=20, return_mode="median")
            except Exception as e:
                print(f"{name} {cfg} tma={tma}: {type(e).__name__}", flush=True)
                continue
            for key, ck in _compiled_kernels(jit_fn).items():
                if key in seen:
                    continue
                try:
                    ck._init_handles()
                    info = f"regs {ck.n_regs} spills {ck.n_spills} shared {ck.metadata.shared}"
                except Exception as e:  # internals differ: report what failed
                    info = f"({type(e).__name__})"
                print(f"{name} {activation} {cfg} tma={tma}: {ms:.3f} ms (whole call) {info}", flush=True)


def breakdown(batch, max_len, heads, head_dim, kv_len, activation):
    """GPU time of each kernel of one forward and one backward (torch.profiler, averaged over 10 calls)."""
    from torch.profiler import ProfilerActivity, profile

    from norm_fusion_inductor.kernels import norm_attention as kernels

    common = _kernel_args(batch, max_len, heads, head_dim, kv_len, activation)
    q = common[0]
    grad = torch.randn_like(q)
    _, *saved = kernels.forward(*common, 1e-5, 1e-6)
    kernels.backward(grad, *common, *saved, kv_grad=not FROZEN_KV)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            _, *saved = kernels.forward(*common, 1e-5, 1e-6)
            kernels.backward(grad, *common, *saved, kv_grad=not FROZEN_KV)
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / 10e3) for e in prof.key_averages() if e.device_time_total > 0]
    for name, ms in sorted(rows, key=lambda r: -r[1]):
        print(f"breakdown {activation} H{heads} max{max_len}: {ms:.3f} ms  {name[:90]}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=768)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--kv-len", type=int, default=128)
    p.add_argument("--heads", type=int, nargs="+", default=[2, 4])
    p.add_argument("--max-lens", type=int, nargs="+", default=[512, 1024, 2048])
    p.add_argument("--activations", nargs="+", default=["softmax", "silu"])
    p.add_argument("--no-max-autotune", action="store_true")
    p.add_argument("--no-train", action="store_true")
    p.add_argument("--json")
    p.add_argument("--configs", action="store_true", help="time the kernels' block configs instead")
    p.add_argument("--probe", action="store_true", help="registers/spills of each kernel and config, timed")
    p.add_argument("--tma", action="store_true", help="--configs: the descriptor path too")
    p.add_argument("--breakdown", action="store_true", help="GPU time per kernel of one forward + backward")
    p.add_argument("--merged", action="store_true",
                   help="the merged dq̂ + dK/dV backward kernel (tuning.attention_merged_dq_hat) for every run")
    p.add_argument("--residual-in-acc", action="store_true",
                   help="the forward adds q̂ in its accumulator (tuning.attention_residual_in_acc; not softmax)")
    p.add_argument("--row-launch", nargs=3, type=int, metavar=("ELEMENTS", "WARPS", "PROGRAMS_PER_SM"),
                   help="the row kernels' tile size, warps and programs per SM (kernels.ROW_*), to compare them")
    p.add_argument("--dense", action="store_true", help="every q sequence max_len long (no jagged rows)")
    p.add_argument("--frozen-kv", action="store_true",
                   help="k and v need no gradient (as in e2e.py's recommendation block): no dK/dV in the backward")
    args = p.parse_args()
    global DENSE, FROZEN_KV
    DENSE, FROZEN_KV = args.dense, args.frozen_kv
    if args.probe:
        for activation in args.activations:
            probe(args.batch, args.max_lens[0], args.heads[0], args.head_dim, args.kv_len, activation)
        return
    if args.merged:
        tuning.adopt(attention_merged_dq_hat=True)
        print("merged dq̂ + dK/dV backward", flush=True)
    if args.residual_in_acc:
        tuning.adopt(attention_residual_in_acc=True)
        print("the residual q̂ in the forward's accumulator", flush=True)
    if args.row_launch:
        from norm_fusion_inductor.kernels import norm_attention as kernels

        kernels.ROW_ELEMENTS, kernels.ROW_WARPS, kernels.ROW_PROGRAMS_PER_SM = args.row_launch
        print(f"row kernels: {args.row_launch}", flush=True)
    if args.breakdown:
        for activation in args.activations:
            breakdown(args.batch, args.max_lens[0], args.heads[0], args.head_dim, args.kv_len, activation)
        return
    if args.configs:
        for activation in args.activations:
            explore_configs(args.batch, args.max_lens[0], args.heads[0], args.head_dim, args.kv_len, activation,
                            args.tma)
        return
    modes = ["default"] + ([] if args.no_max_autotune else ["max-autotune-no-cudagraphs"])
    results = []
    print("| act | H | max | pass | rows | fused jagged | fused dense | " + " | ".join(f"compile {m}" for m in modes)
          + " | jagged vs default | dense vs default | err |")
    for activation in args.activations:
        for heads in args.heads:
            for max_len in args.max_lens:
                for train in ([False] if args.no_train else [False, True]):
                    r = run_shape(args.batch, max_len, heads, args.head_dim, args.kv_len, activation, modes, train)
                    results.append(r)
                    t = r["times_ms"]
                    print(f"| {activation} | {heads} | {max_len} | {'fwd+bwd' if train else 'fwd'} | {r['rows']} | "
                          + " | ".join(f"{t[n]:.3f}" for n in t)
                          + f" | {t['compile default'] / t['fused jagged']:.2f}x"
                          f" | {t['compile default'] / t['fused dense']:.2f}x | {r['err_vs_eager']:.1e} |", flush=True)
                    torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                           results=results), f, indent=1)


if __name__ == "__main__":
    main()
