"""RMSNorm → linear (or LayerNorm → linear with --norm ln) on the GPU: Inductor's norm kernel, cuBLAS, torch.compile default and max-autotune, and this
plugin, measured side by side in one run (triton.testing.do_bench medians, variants interleaved round-robin).

    python benchmarks/prenorm.py                      # the issue's sweep, all baselines
    python benchmarks/prenorm.py --quick              # three shapes, no max-autotune
    python benchmarks/prenorm.py --shapes 16384x4096x4096 --json out.json

hidden % = (t_norm + t_mm − t_fused) / t_norm: the share of the norm's own time that the fusion removes.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SWEEP = [(m, k, n) for m in (65536, 262144) for k in (256, 512, 1024, 2048) for n in (256, 512, 1024, 2048)]
LARGE = [(16384, 4096, 4096), (16384, 4096, 12288), (8192, 4096, 28672)]
QUICK = [(65536, 1024, 1024), (262144, 256, 256), (16384, 4096, 4096)]
EPS = 1e-6


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


NORM = "rms"  # set by --norm


def norm(x, g):
    """The model's norm: RMSNorm with weight, or LayerNorm with weight and a bias derived from it."""
    if NORM == "ln":
        return F.layer_norm(x, (x.shape[-1],), g, 0.5 * g, EPS)
    return F.rms_norm(x, (x.shape[-1],), g, EPS)


def reference(x, g, w):
    return norm(x.double(), g.double()) @ w.double().t()


def norm_then_linear(x, g, w):
    return F.linear(norm(x, g), w)


def fused(x, g, w, plan=None):
    from norm_fusion_inductor.kernels import norm_gemm as kern

    if NORM == "ln":
        return kern.layer_norm_matmul(x, g, 0.5 * g, w, None, EPS, plan=plan)[0]
    return kern.rms_norm_matmul(x, g, w, None, EPS, plan=plan)[0]


def tuned(x, g, w, prologues):
    from norm_fusion_inductor.kernels import norm_gemm as kern

    if NORM == "ln":
        return kern.tuned_plan(x, w, g, None, EPS, prologues=prologues, beta=0.5 * g, center=True)
    return kern.tuned_plan(x, w, g, None, EPS, prologues=prologues)


def bench_round_robin(fns: dict, rounds: int = 2, cudagraph: bool = False) -> dict:
    """Median of per-round medians (norm_fusion_inductor.timing: interleaved, the order reversed every other
    round). cudagraph=True times graph replays: GPU time without the host's share (compiled callables are
    host-bound below ~0.15 ms of GPU time)."""
    from triton.testing import do_bench, do_bench_cudagraph

    from norm_fusion_inductor.timing import interleaved_medians

    if cudagraph:
        return interleaved_medians(fns, rounds, lambda fn: do_bench_cudagraph(fn, rep=30, return_mode="median"))
    return interleaved_medians(fns, rounds, lambda fn: do_bench(fn, warmup=10, rep=30, return_mode="median"))


def add_timings(row: dict, fns: dict, cudagraph: bool) -> None:
    """Time ``fns`` side by side into row["t_<name>"], then each fused implementation's hidden fraction of the
    norm, (t_norm + t_mm − t) / t_norm, and its ratio to the best baseline (default or max-autotune)."""
    row.update({f"t_{k}": v for k, v in bench_round_robin(fns, cudagraph=cudagraph).items()})
    best_baseline = min(row["t_default"], row.get("t_max_autotune", float("inf")))
    for impl in ("fused_kernel", "plugin", "plugin_fused"):
        t = row[f"t_{impl}"]
        row[f"hidden_{impl}"] = (row["t_norm"] + row["t_mm"] - t) / row["t_norm"]
        row[f"ratio_{impl}"] = t / best_baseline


def run_shape(M, K, N, dtype, args) -> dict:
    import norm_fusion_inductor as nfi
    from norm_fusion_inductor.kernels import norm_gemm as kern
    from norm_fusion_inductor.timing import sm_copy

    torch._dynamo.reset()
    dev = "cuda"
    x = torch.randn(M, K, device=dev, dtype=dtype)
    g = (1 + 0.1 * torch.randn(K, device=dev)).to(dtype)
    w = (torch.randn(N, K, device=dev) / K**0.5).to(dtype)
    normed = norm(x, g)
    row = {"M": M, "K": K, "N": N, "dtype": str(dtype).replace("torch.", "")}

    compile_t = {}

    def compiled(label, fn, **kw):
        t0 = time.perf_counter()
        c = torch.compile(fn, **kw)
        c(x, g, w)
        torch.cuda.synchronize()
        compile_t[label] = time.perf_counter() - t0  # compile + first call (the plugin's measurement included)
        return c

    norm_only = compiled("norm", lambda x, g, w: norm(x, g))
    default = compiled("default", norm_then_linear)
    nfi.clear_reports()
    # policy "auto": fused only where measured faster
    plugin = compiled("plugin", norm_then_linear, backend="norm_fusion",
                      options={"norm_fusion": {"fusions": nfi.FUSIONS, "compiled_check": args.compiled_check}})
    row["plugin_choice"] = [(s.rewritten, s.reason) for s in nfi.reports()]
    # policy "always": the fused kernel as Inductor launches it from its generated code (the direct launch)
    plugin_fused = compiled("plugin_fused", norm_then_linear, backend="norm_fusion",
                            options={"norm_fusion": {"fusions": nfi.FUSIONS, "policy": "always"}})
    # another code object: compiled anew
    default_again = compiled("default_again", lambda x, g, w: norm_then_linear(x, g, w))
    y = torch.empty_like(x)
    row["plans"] = {"chosen": tuned(x, g, w, kern.ALL_PROLOGUES)}
    if not args.lean:
        in_loop, pre_pass = tuned(x, g, w, ("in_loop",)), tuned(x, g, w, ("pre_pass",))
        row["plans"].update(in_loop=in_loop, pre_pass=pre_pass)
    fns = {
        "norm": lambda: norm_only(x, g, w),
        "mm": lambda: torch.mm(normed, w.t()),
        "copy": lambda: sm_copy(y, x),  # on the SMs, as the plugin's selection times it
        "default": lambda: default(x, g, w),
        "fused_kernel": lambda: fused(x, g, w),
        "in_loop": lambda: fused(x, g, w, in_loop),
        "pre_pass": lambda: fused(x, g, w, pre_pass),
        "plain_gemm": lambda: kern.rms_norm_matmul(x, g, w, None, EPS,
                                                   plan=(pre_pass[0].replace("pre_pass", "plain"), pre_pass[1])),
    }
    if args.lean:
        for name in ("in_loop", "pre_pass", "plain_gemm"):
            del fns[name]
    fns |= {
        "plugin": lambda: plugin(x, g, w),
        "plugin_fused": lambda: plugin_fused(x, g, w),
        # control: torch.compile default compiled a second time. Inductor picks its norm kernel's config per
        # compile, so two compiles of one graph can differ (an unfused plugin site too)
        "default_again": lambda: default_again(x, g, w),
    }
    if not args.no_max_autotune and (args.max_autotune_shapes is None or
                                     f"{M}x{K}x{N}" in args.max_autotune_shapes):
        fns["max_autotune"] = (lambda c: (lambda: c(x, g, w)))(
            compiled("max_autotune", norm_then_linear, mode="max-autotune-no-cudagraphs"))

    # correctness first: fresh inputs, poisoned outputs are impossible to miss since rel_err would be huge
    ref = reference(x, g, w)
    out_k = fused(x, g, w)
    row["err_fused"] = rel_err(out_k, ref)
    row["err_plugin"] = rel_err(plugin(x, g, w), ref)
    row["err_plugin_fused"] = rel_err(plugin_fused(x, g, w), ref)
    row["err_default"] = rel_err(default(x, g, w), ref)
    add_timings(row, fns, args.cudagraph)
    if "t_plain_gemm" in row:
        row["gemm_vs_cublas"] = row["t_plain_gemm"] / row["t_mm"]
    row["compile_s"] = compile_t
    return row


def sweep_arguments(doc: str, default_norm: str) -> argparse.ArgumentParser:
    """The options the norm/matmul sweeps share (this one and postnorm.py)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="*", help="MxKxN ...")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--norm", choices=["rms", "ln"], default=default_norm)
    p.add_argument("--no-max-autotune", action="store_true")
    p.add_argument("--cudagraph", action="store_true", help="time CUDA-graph replays (GPU time only)")
    p.add_argument("--json")
    p.add_argument("--no-compiled-check", dest="compiled_check", action="store_false",
                   help="the plugin (policy auto) without compiled_check: near misses decided by the lower bound")
    p.add_argument("--part", default="1/1", help="i/n: the i-th of n slices of the shapes (to fit a device call)")
    return p


def part_of(shapes: list, part: str) -> list:
    """--part i/n: every n-th shape from the i-th, so that each slice mixes small and large ones."""
    i, n = (int(v) for v in part.split("/"))
    return shapes[i - 1::n]


def parse_shapes(shapes: list[str] | None) -> list[tuple] | None:
    return [tuple(int(v) for v in s.split("x")) for s in shapes] if shapes else None


def main() -> None:
    p = sweep_arguments(__doc__, "rms")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--max-autotune-shapes", nargs="*", help="compile max-autotune only for these MxKxN (slow)")
    p.add_argument("--lean", action="store_true", help="skip the per-prologue columns (faster)")
    args = p.parse_args()
    shapes = part_of(parse_shapes(args.shapes) or (QUICK if args.quick else SWEEP + LARGE), args.part)
    if args.quick:
        args.no_max_autotune = True
    dtype = getattr(torch, args.dtype)
    global NORM
    NORM = args.norm
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  triton "
          f"{__import__('triton').__version__}  python {platform.python_version()}  "
          f"{time.strftime('%Y-%m-%d')}  norm={args.norm}", flush=True)
    rows = []
    cols = ["t_copy", "t_norm", "t_mm", "t_default", "t_default_again", "t_max_autotune", "t_plain_gemm", "t_in_loop", "t_pre_pass",
            "t_fused_kernel", "t_plugin_fused", "t_plugin"]
    print("| M×K×N | " + " | ".join(c[2:] for c in cols) +
          " | hidden % (plugin) | hidden % (kernel) | plugin / best | fused? | err |", flush=True)
    print("|" + "---|" * (len(cols) + 6), flush=True)
    for M, K, N in shapes:
        try:
            row = run_shape(M, K, N, dtype, args)
        except Exception as e:  # report and go on: one broken shape must not hide the others
            print(f"| {M}×{K}×{N} | failed: {type(e).__name__}: {str(e)[:200]} |", flush=True)
            continue
        rows.append(row)
        if args.json:  # after every shape: a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        cells = [f"{row[c]:.3f}" if c in row else "–" for c in cols]
        print(f"| {M}×{K}×{N} | " + " | ".join(cells) +
              f" | {100 * row['hidden_plugin']:.0f} | {100 * row['hidden_fused_kernel']:.0f} | "
              f"{row['ratio_plugin']:.3f} | {'yes' if any(c[0] for c in row['plugin_choice']) else 'no'} | "
              f"{max(row['err_plugin'], row['err_plugin_fused']):.1e} |",
              flush=True)
    if rows:
        for impl in ("plugin", "plugin_fused", "fused_kernel"):
            hid = [r[f"hidden_{impl}"] for r in rows if r["K"] <= 2048 and r["N"] <= 2048]
            if hid:
                print(f"{impl}: median hidden (K,N ≤ 2048) {100 * statistics.median(hid):.1f}%, "
                      f"best {100 * max(hid):.1f}%")
        print(f"worst plugin / best baseline: {max(r['ratio_plugin'] for r in rows):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
