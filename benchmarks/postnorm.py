"""matmul → norm (post-norm) on the GPU: y = norm(x Wᵀ + b + residual) with the norm's weight (and bias for
LayerNorm). cuBLAS, Inductor's norm kernel alone, torch.compile default (and max-autotune), the fused kernel and
this plugin, measured side by side in one run (do_bench medians, variants interleaved round-robin).

    python benchmarks/postnorm.py --norm ln                 # the sweep (17 shapes, N ≤ 256)
    python benchmarks/postnorm.py --norm ln --part 1/2      # every other shape of it
    python benchmarks/postnorm.py --norm rms --shapes 65536x256x1024 --json out.json

hidden % = (t_norm + t_mm − t_fused) / t_norm: the share of the norm's own time (Inductor's kernel reading z and
the residual) that the fusion removes.
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

# the fused epilogue holds whole rows (N ≤ 256); wider post-norms are the regrouped rewrite's (blocks.py)
SWEEP = [(m, k, n) for m in (65536, 262144) for k in (256, 512, 1024, 2048) for n in (128, 256)]
LARGE = [(16384, 4096, 256)]
EPS = 1e-5
NORM = "ln"  # set by --norm


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


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


def sweep_arguments(doc: str, default_norm: str) -> argparse.ArgumentParser:
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


def norm(z, g, beta):
    if NORM == "ln":
        return F.layer_norm(z, (z.shape[-1],), g, beta, EPS)
    return F.rms_norm(z, (z.shape[-1],), g, EPS)


def block(x, w, b, r, g, beta):
    return norm(F.linear(x, w, b) + r, g, beta)


def run_shape(M, K, N, dtype, args) -> dict:
    import norm_fusion_inductor as nfi
    from norm_fusion_inductor.kernels import epilogue_gemm as eg
    from norm_fusion_inductor.timing import sm_copy

    torch._dynamo.reset()
    dev = "cuda"
    x = torch.randn(M, K, device=dev, dtype=dtype)
    w = (torch.randn(N, K, device=dev) / K**0.5).to(dtype)
    b = torch.randn(N, device=dev, dtype=dtype)
    r = torch.randn(M, N, device=dev, dtype=dtype)
    g = (1 + 0.1 * torch.randn(N, device=dev)).to(dtype)
    beta = (0.1 * torch.randn(N, device=dev)).to(dtype) if NORM == "ln" else None
    inputs = (x, w, b, r, g, beta)
    z = torch.addmm(b, x, w.t())
    row = {"M": M, "K": K, "N": N, "dtype": str(dtype).replace("torch.", ""), "norm": NORM}
    compile_t = {}

    def compiled(label, fn, *example, **kw):
        t0 = time.perf_counter()
        c = torch.compile(fn, **kw)
        c(*example)
        torch.cuda.synchronize()
        compile_t[label] = time.perf_counter() - t0
        return c

    norm_only = compiled("norm", lambda z, r, g, beta: norm(z + r, g, beta), z, r, g, beta)
    default = compiled("default", block, *inputs)
    nfi.clear_reports()
    plugin = compiled("plugin", block, *inputs, backend="norm_fusion",
                      options={"norm_fusion": {"compiled_check": args.compiled_check}})
    row["plugin_choice"] = [(s.fusion, s.rewritten, s.reason) for s in nfi.reports()]
    nfi.clear_reports()
    plugin_fused = compiled("plugin_fused", block, *inputs, backend="norm_fusion",
                            options={"norm_fusion": {"policy": "always"}})
    row["plugin_fused_impl"] = [s.implementation for s in nfi.reports() if s.rewritten]
    # the control: the default compiled once more (another code object); Inductor's per-compile choices move
    # its time by several %
    default_again = compiled("default_again", lambda *t: block(*t), *inputs)

    def fused_with(config=None):
        return eg.post_norm_gemm(x, w, b, r, g, beta, EPS, layer_norm=NORM == "ln", config=config)[0]

    fused_with()  # tunes the block config
    plan = eg.tuned_for(M, N, K, dtype, False, eg.post_norm_epilogue(NORM == "ln", True, True, False, False))
    row["plan"] = plan

    def fused():
        return fused_with(plan)

    y = torch.empty_like(z)
    fns = {
        "copy": lambda: sm_copy(y, z),  # on the SMs, as the plugin's selection times it (--cudagraph: copy_ would not)
        "mm": lambda: torch.addmm(b, x, w.t()),
        "norm": lambda: norm_only(z, r, g, beta),
        "default": lambda: default(*inputs),
        "fused_kernel": fused,
        "plugin_fused": lambda: plugin_fused(*inputs),
        "plugin": lambda: plugin(*inputs),
        "default_again": lambda: default_again(*inputs),
    }
    if not args.no_max_autotune:
        fns["max_autotune"] = (lambda c: (lambda: c(*inputs)))(
            compiled("max_autotune", block, *inputs, mode="max-autotune-no-cudagraphs"))

    # correctness first, on this shape's inputs
    ref = block(*(t.double() if t is not None else None for t in inputs))
    row["err_fused"] = rel_err(fused(), ref)
    row["err_plugin"] = rel_err(plugin(*inputs), ref)
    row["err_plugin_fused"] = rel_err(plugin_fused(*inputs), ref)
    row["err_default"] = rel_err(default(*inputs), ref)
    add_timings(row, fns, args.cudagraph)
    row["compile_s"] = compile_t
    return row


def main() -> None:
    p = sweep_arguments(__doc__, "ln")
    args = p.parse_args()
    shapes = part_of(parse_shapes(args.shapes) or SWEEP + LARGE, args.part)
    global NORM
    NORM = args.norm
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  triton "
          f"{__import__('triton').__version__}  python {platform.python_version()}  "
          f"{time.strftime('%Y-%m-%d %H:%M')}  norm={args.norm} (bias, residual, affine)", flush=True)
    cols = ["t_copy", "t_mm", "t_norm", "t_default", "t_default_again", "t_max_autotune", "t_fused_kernel", "t_plugin_fused", "t_plugin"]
    print("| M×K×N | " + " | ".join(c[2:] for c in cols) +
          " | hidden % (plugin) | hidden % (kernel) | plugin / best | fused? | plan | err |", flush=True)
    print("|" + "---|" * (len(cols) + 7), flush=True)
    rows = []
    for M, K, N in shapes:
        try:
            row = run_shape(M, K, N, getattr(torch, args.dtype), args)
        except Exception as e:  # report and go on: one broken shape must not hide the others
            print(f"| {M}×{K}×{N} | failed: {type(e).__name__}: {str(e)[:300]} |", flush=True)
            continue
        rows.append(row)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1, default=str)
        cells = [f"{row[c]:.3f}" if c in row else "–" for c in cols]
        print(f"| {M}×{K}×{N} | " + " | ".join(cells) +
              f" | {100 * row['hidden_plugin']:.0f} | {100 * row['hidden_fused_kernel']:.0f} | "
              f"{row['ratio_plugin']:.3f} | {'yes' if any(c[1] for c in row['plugin_choice']) else 'no'} | "
              f"{row['plan']['BLOCK_M']}x{row['plan']['BLOCK_N']}x{row['plan']['BLOCK_K']} | "
              f"{max(row['err_plugin'], row['err_plugin_fused'], row['err_fused']):.1e} |", flush=True)
    if rows:
        for impl in ("plugin", "plugin_fused", "fused_kernel"):
            hid = [r[f"hidden_{impl}"] for r in rows if r["N"] <= 4096]
            print(f"{impl}: median hidden (N ≤ 4096) {100 * statistics.median(hid):.1f}%, best {100 * max(hid):.1f}%")
        print(f"worst plugin / best baseline: {max(r['ratio_plugin'] for r in rows):.3f}")


if __name__ == "__main__":
    sys.exit(main())
