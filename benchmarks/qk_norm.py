"""QK-norm attention on the GPU: the per-head RMSNorm of q and k + RoPE + SDPA, as HF model code writes it
(Qwen3), against the fused op, forward and forward + backward, side by side in one run.

Columns (median ms, interleaved rounds):
    compile default / max-autotune   torch.compile of the eager block (norms, RoPE, SDPA with enable_gqa)
    norms only                       torch.compile (default) of the norms + RoPE alone: the time to hide
    sdpa flash                       SDPA's flash backend alone on the normalized q̂, k̂ (GQA by enable_gqa)
    sdpa default                     SDPA alone with the backend torch picks (what the compiled block calls)
    fused                            norm_fusion::qk_norm_attention
hidden % = (norms only + sdpa flash − fused) / norms only: how much of the norms' time the fusion hides (the
issue's measure); "vs default" uses sdpa default instead.

    python3 benchmarks/qk_norm.py --check              # float64 parity of the kernels on the GPU
    python3 benchmarks/qk_norm.py --configs            # the kernels' block configs, each kernel alone
    python3 benchmarks/qk_norm.py --json out.json      # the issue's LLM shape: batch 4, seq 4096, 32/8 heads, D 128
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
import triton

from attention import bench_interleaved  # benchmarks/attention.py (scripts run from benchmarks/)
from norm_fusion_inductor import qk_norm_ops
from norm_fusion_inductor.kernels import qk_norm_attention as kernels
from norm_fusion_inductor.kernels import tuning

op = torch.ops.norm_fusion.qk_norm_attention


def _rope_tables(batch, seq, head_dim, device, dtype):
    inv_freq = 1.0 / (1e6 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    freqs = torch.arange(seq, device=device).float()[:, None] * inv_freq[None]
    emb = torch.cat((freqs, freqs), -1)
    return emb.cos()[None].expand(batch, -1, -1).to(dtype), emb.sin()[None].expand(batch, -1, -1).to(dtype)


def _operands(batch, seq, heads, kv_heads, head_dim, dtype=torch.bfloat16, seed=0):
    """The projections' outputs [B, L, H·D] (as HF's q_proj/k_proj/v_proj write them), weights, rope tables."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape, std=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, device="cuda") * std + shift).to(dtype)

    q, k, v = rand(batch, seq, heads * head_dim), rand(batch, seq, kv_heads * head_dim, std=3.0), \
        rand(batch, seq, kv_heads * head_dim)
    weights = rand(head_dim, std=0.2, shift=1.0), rand(head_dim, std=0.2, shift=1.0)
    return q, k, v, weights, _rope_tables(batch, seq, head_dim, "cuda", dtype)


def _split(t, head_dim):
    B, L, W = t.shape
    return t.view(B, L, W // head_dim, head_dim).transpose(1, 2)


def check():
    """The kernels against float64 (and eager in the same dtype against float64, for scale), outputs and grads."""
    def rel(a, b):
        return ((a.double() - b).norm() / b.norm()).item()

    cases = [  # batch, seq, heads, kv_heads, head_dim, causal, rope, dtype
        (2, 256, 8, 2, 128, True, True, torch.bfloat16), (2, 200, 4, 4, 128, True, True, torch.bfloat16),
        (2, 257, 8, 2, 64, False, True, torch.bfloat16), (1, 300, 4, 1, 128, True, False, torch.float16),
        (2, 128, 4, 2, 32, False, False, torch.float16), (1, 1030, 8, 2, 128, True, True, torch.bfloat16)]
    for batch, seq, heads, kv_heads, head_dim, causal, rope, dtype in cases:
        q, k, v, (wq, wk), (cos, sin) = _operands(batch, seq, heads, kv_heads, head_dim, dtype)
        if not rope:
            cos = sin = None
        ops_in = [_split(t, head_dim) for t in (q, k, v)] + [wq, wk]
        grad = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=dtype)
        leaves64 = [t.detach().double().requires_grad_() for t in ops_in]
        tables64 = (None, None) if cos is None else (cos.double(), sin.double())
        ref = qk_norm_ops.qk_norm_attention_reference(*leaves64, *tables64, 1e-6, 1e-6, head_dim ** -0.5, causal)
        ref_grads = torch.autograd.grad(ref, leaves64, grad.double())
        results = {}
        for name, fn in (("fused", lambda *a: qk_norm_ops.qk_norm_attention(*a, causal=causal)),
                         ("eager", lambda *a: qk_norm_ops.qk_norm_attention_reference(
                             *a, 1e-6, 1e-6, head_dim ** -0.5, causal))):
            leaves = [t.detach().clone().requires_grad_() for t in ops_in]
            out = fn(*leaves, cos, sin)
            grads = torch.autograd.grad(out, leaves, grad)
            results[name] = [rel(out, ref)] + [rel(g, r) for g, r in zip(grads, ref_grads)]
        print(f"check B{batch} L{seq} H{heads}/{kv_heads} D{head_dim} causal={causal} rope={rope} {dtype}: "
              + "; ".join(f"{n} out/dq/dk/dv/dwq/dwk " + " ".join(f"{e:.1e}" for e in errs)
                          for n, errs in results.items()), flush=True)


FORWARD_CONFIGS = [(128, 128, 8, 3), (128, 64, 8, 3), (64, 64, 4, 3), (128, 128, 8, 2), (128, 64, 4, 4)]
DQ_CONFIGS = [(64, 64, 4, 2), (128, 64, 8, 2), (64, 64, 4, 3), (128, 32, 4, 3)]
DKDV_CONFIGS = [(64, 64, 4, 2), (64, 128, 8, 2), (64, 64, 4, 3), (32, 64, 4, 3)]


def explore_configs(batch, seq, heads, kv_heads, head_dim, causal=True):
    """Each kernel's configs, pointer loads and tensor descriptors, the rest at its default (a backward
    config is timed as the whole backward: delta, dK/dV and dq kernels)."""
    q, k, v, (wq, wk), (cos, sin) = _operands(batch, seq, heads, kv_heads, head_dim)
    q, k, v = (_split(t, head_dim) for t in (q, k, v))
    scale = head_dim ** -0.5
    saved = kernels.forward(q, k, v, wq, wk, cos, sin, 1e-6, 1e-6, scale, causal, True)
    grad = torch.randn_like(saved[0])
    rest = (q, k, v, wq, wk, cos, sin, 1e-6, scale, causal, *saved)
    flops = 4 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
    best = {}  # (kernel, tma) -> (ms, config)
    for kernel, configs in (("forward", FORWARD_CONFIGS), ("dq", DQ_CONFIGS), ("dkdv", DKDV_CONFIGS)):
        for cfg in configs:
            for tma in (False, True):
                if kernel == "forward":
                    fn = lambda: kernels.forward(q, k, v, wq, wk, cos, sin, 1e-6, 1e-6, scale, causal, True,  # noqa
                                                 config=cfg, tma=tma)
                else:
                    fn = lambda: kernels.backward(grad, *rest, tma=tma, **{f"{kernel}_config": cfg})  # noqa
                try:
                    ms = triton.testing.do_bench(fn, warmup=3, rep=20, return_mode="median")
                    tflops = flops * (1 if kernel == "forward" else 2.5) / ms / 1e9
                    print(f"config {kernel} {cfg} tma={tma}: {ms:.3f} ms ({tflops:.0f} TFLOP/s whole call)",
                          flush=True)
                    if ms < best.get((kernel, tma), (float("inf"),))[0]:
                        best[kernel, tma] = (ms, cfg)
                except Exception as e:  # out of shared memory or registers: reported, not fatal
                    print(f"config {kernel} {cfg} tma={tma}: {type(e).__name__}: {str(e)[:100]}", flush=True)
    return best


def adopt_best(best: dict) -> None:
    """Make the fastest load path per pass, and each kernel's fastest config on it, the kernels' defaults for the
    rest of this run. The backward's two kernels share the path: the one whose best dq + best dK/dV is smaller."""
    def total(kernels_of_pass, tma):
        return sum(best.get((k, tma), (float("inf"),))[0] for k in kernels_of_pass)

    for which, kernels_of_pass in (("forward", ["forward"]), ("backward", ["dq", "dkdv"])):
        tma = total(kernels_of_pass, True) < total(kernels_of_pass, False)
        tuning.adopt(**{f"qk_attention_tma_{which}": tma})
        for kernel in kernels_of_pass:
            kernels.GPU_CONFIGS[kernel] = best[kernel, tma][1]
    print(f"adopted: configs {kernels.GPU_CONFIGS}, {tuning.current()}", flush=True)


def run_shape(batch, seq, heads, kv_heads, head_dim, modes, train, causal=True):
    torch._dynamo.reset()  # each row compiles the same functions again: stay under the recompile limit
    q, k, v, (wq, wk), (cos, sin) = _operands(batch, seq, heads, kv_heads, head_dim)
    scale = head_dim ** -0.5
    inputs = [t.requires_grad_(train) for t in (q, k, v, wq, wk)]

    def norms(q, k, wq, wk):  # HF's per-head norms and RoPE (Qwen3RMSNorm + apply_rotary_pos_emb)
        return (qk_norm_ops.rms_norm_rope(_split(q, head_dim), wq, 1e-6, cos, sin),
                qk_norm_ops.rms_norm_rope(_split(k, head_dim), wk, 1e-6, cos, sin))

    def block(q, k, v, wq, wk):
        q_hat, k_hat = norms(q, k, wq, wk)
        out = F.scaled_dot_product_attention(q_hat, k_hat, _split(v, head_dim), is_causal=causal, scale=scale,
                                             enable_gqa=True)
        return out.transpose(1, 2).reshape(batch, seq, heads * head_dim)

    def fused(q, k, v, wq, wk):
        out = op(_split(q, head_dim), _split(k, head_dim), _split(v, head_dim), wq, wk, cos, sin, 1e-6, 1e-6,
                 scale, causal, train)[0]
        return out.transpose(1, 2).reshape(batch, seq, heads * head_dim)

    with torch.no_grad():
        q_hat, k_hat = (t.detach().requires_grad_(train) for t in norms(q, k, wq, wk))
    v_heads = _split(v.detach(), head_dim).requires_grad_(train)

    def sdpa_flash(k_hat=k_hat, v_heads=v_heads, gqa=True):
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q_hat, k_hat, v_heads, is_causal=causal, scale=scale,
                                                  enable_gqa=gqa)

    flash_leaves = [q_hat, k_hat, v_heads]
    flash = sdpa_flash
    try:
        flash()
    except RuntimeError as e:  # a flash backend without GQA: k, v expanded beforehand (not timed)
        print(f"sdpa flash with enable_gqa failed ({str(e)[:80]}): k, v expanded", flush=True)
        groups = heads // kv_heads
        with torch.no_grad():
            k_rep, v_rep = (t.repeat_interleave(groups, 1).requires_grad_(train) for t in (k_hat, v_heads))
        flash = lambda: sdpa_flash(k_rep, v_rep, False)  # noqa: E731
        flash_leaves = [q_hat, k_rep, v_rep]
    def sdpa_default():
        return F.scaled_dot_product_attention(q_hat, k_hat, v_heads, is_causal=causal, scale=scale, enable_gqa=True)

    cases = {"fused": (lambda: fused(*inputs), inputs), "sdpa flash": (flash, flash_leaves),
             "sdpa default": (sdpa_default, [q_hat, k_hat, v_heads])}
    compiled_norms = torch.compile(norms, dynamic=False)
    cases["norms only"] = (lambda: compiled_norms(q, k, wq, wk), [q, k, wq, wk])
    for mode in modes:
        compiled = torch.compile(block, mode=None if mode == "default" else mode, dynamic=False)
        cases[f"compile {mode}"] = (lambda c=compiled: c(*inputs), inputs)
    fns = {name: fn for name, (fn, _) in cases.items()}
    if train:
        def step(fn, leaves):
            outs = fn()
            outs = outs if isinstance(outs, tuple) else (outs,)
            grads = [torch.randn_like(o) for o in outs]
            return lambda: torch.autograd.grad(fn(), leaves, grads)

        fns = {name: step(fn, leaves) for name, (fn, leaves) in cases.items()}
    for fn in fns.values():  # compile and warm up outside the timing
        fn()
    torch.cuda.synchronize()
    times = bench_interleaved(fns, rep=40)
    with torch.no_grad():
        ref = block(*inputs).float()
        err = ((fused(*inputs).float() - ref).norm() / ref.norm()).item()
    def hidden(attention):
        return (times["norms only"] + times[attention] - times["fused"]) / times["norms only"]

    return dict(batch=batch, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=head_dim, causal=causal,
                train=train, times_ms=times, hidden=hidden("sdpa flash"), hidden_vs_default=hidden("sdpa default"),
                err_vs_eager=err)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="4x4096x32x8x128", help="batch x seq x heads x kv_heads x head_dim")
    p.add_argument("--no-max-autotune", action="store_true")
    p.add_argument("--no-train", action="store_true")
    p.add_argument("--check", action="store_true")
    p.add_argument("--configs", action="store_true")
    p.add_argument("--tune", action="store_true", help="time the configs, adopt the fastest, then benchmark")
    p.add_argument("--json")
    args = p.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    shape = tuple(int(s) for s in args.shape.split("x"))
    if args.check:
        return check()
    if args.configs:
        return explore_configs(*shape)
    if args.tune:
        adopt_best(explore_configs(*shape))
    modes = ["default"] + ([] if args.no_max_autotune else ["max-autotune"])
    rows = []
    columns = ["fused", "sdpa flash", "sdpa default", "norms only"] + [f"compile {m}" for m in modes]
    print("| shape B×L×Hq/Hk×D | pass | " + " | ".join(columns)
          + " | compile default / fused | hidden % (flash) | hidden % (default) | err |")
    print("|---" * (7 + len(columns)) + "|")
    for train in [False] + ([] if args.no_train else [True]):
        row = run_shape(*shape, modes, train)
        rows.append(row)
        t = row["times_ms"]
        print(f"| {args.shape} | {'fwd+bwd' if train else 'fwd'} | "
              + " | ".join(f"{t[n]:.3f}" for n in columns)
              + f" | {t['compile default'] / t['fused']:.2f}× | {100 * row['hidden']:.0f} | "
              f"{100 * row['hidden_vs_default']:.0f} | {row['err_vs_eager']:.1e} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
