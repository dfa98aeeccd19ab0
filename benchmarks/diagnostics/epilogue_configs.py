"""Every block config of the Triton epilogue GEMM, one by one, against cuBLAS: which config wins at which shape
and epilogue, and the warp-specialized variants (``WARP_SPECIALIZE``, which the tuner does not offer: on Triton 3.6
/ sm_90 they computed wrong results with any epilogue piece, benchmarks/results/gpu-2026-12-03c/call_b). Each
config's output is checked against the first config's (max |Δ| / max |out|).

    python benchmarks/diagnostics/epilogue_configs.py [MxKxN:epilogue ...] [--rounds 3]
    python benchmarks/diagnostics/epilogue_configs.py --pieces [MxKxN ...] [--variant FIELD ...] [--only PIECE ...]
    python benchmarks/diagnostics/epilogue_configs.py --grid [--sites kind:MxKxN[:activation][:field=value] ...] [--json out.json]

Epilogues as in ``benchmarks/epilogue_gemm.py``. ``--pieces``: instead, what each epilogue piece costs at a shape —
the tuned kernel with one piece added at a time (row scale, LayerNorm's mean correction, bias, each activation;
the producer's residual read and statistics). ``--variant FIELD``: each piece the kernel tuning field FIELD changes
(``VARIANTS``) timed also with it on, in the same rounds, and checked against the piece without it. ``--grid``:
every config the tuner offers at each site of the calibration grid (``calibrate.SITES``) and the recsys towers'
GEMMs, as the selection builds them (``selection.epilogue_runner``), timed by ``timing.graph_ms``: how far each
config runs from the tuned one (the case for deciding a site without tuning it).
Median ms (do_bench), interleaved over the rounds; GPU only.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for path in (ROOT, os.path.join(ROOT, "benchmarks")):
    if path not in sys.path:
        sys.path.insert(0, path)

from epilogue_gemm import EPILOGUES  # noqa: E402

from norm_fusion_inductor.kernels import epilogue_gemm as eg  # noqa: E402
from norm_fusion_inductor.timing import interleaved_medians  # noqa: E402

DEFAULT_CASES = ["131072x512x1024:ln_gelu_consumer", "131072x1024x512:producer_ln_stats",
                 "262144x256x2048:swiglu_consumer", "262144x1024x256:producer_rms_stats",
                 "262144x256x1024:rms_consumer", "16384x4096x4096:plain"]
# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps, CTAS_PER_SM): warp-specialized candidates (Triton 3.6 on sm_90
# partitions the loop only at 4 warps: a TMA producer warp ahead of the MMA + epilogue warps)
WS_CANDIDATES = [(128, 128, 64, 4, 4, 1), (128, 128, 64, 3, 4, 1), (128, 128, 128, 3, 4, 1), (64, 256, 64, 3, 4, 1),
                 (128, 128, 64, 2, 4, 2), (64, 128, 64, 3, 4, 2)]


def ws_configs(epilogue) -> list:
    if epilogue.gated or epilogue.head_dim:  # reshape/split: the partitioner rejects them (Triton 3.6)
        return []
    configs = [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_stages=s, num_warps=w, FLATTEN=False,
                    WARP_SPECIALIZE=True, CTAS_PER_SM=c) for bm, bn, bk, s, w, c in WS_CANDIDATES]
    if epilogue.stats != "none":
        configs = [c for c in configs if c["BLOCK_N"] == eg.stats_width(torch.device("cuda"))]
    return configs


PIECES = {
    "plain": eg.Epilogue(),
    "rms": eg.Epilogue(row_norm="rms"),
    "ln": eg.Epilogue(row_norm="ln"),
    "ln+bias": eg.Epilogue(row_norm="ln", bias=True),
    "rms+relu": eg.Epilogue(row_norm="rms", activation="relu"),
    "rms+silu": eg.Epilogue(row_norm="rms", activation="silu"),
    "rms+gelu": eg.Epilogue(row_norm="rms", activation="gelu"),
    "rms+gelu_tanh": eg.Epilogue(row_norm="rms", activation="gelu_tanh"),
    "ln+bias+gelu": eg.Epilogue(row_norm="ln", bias=True, activation="gelu"),
    "ln+bias+gelu_tanh": eg.Epilogue(row_norm="ln", bias=True, activation="gelu_tanh"),
    "rms+swiglu": eg.Epilogue(row_norm="rms", activation="silu_mul"),
    # the stream's producer: the residual read, each statistics kind, both
    "residual": eg.Epilogue(residual=True),
    "rms stats": eg.Epilogue(stats="rms"),
    "ln stats": eg.Epilogue(stats="ln"),
    "residual+rms stats": eg.Epilogue(residual=True, stats="rms"),
    "bias+residual+ln stats": eg.Epilogue(bias=True, residual=True, stats="ln"),
}


# kernel tuning fields (norm_fusion_inductor.kernels.tuning) that --variant can turn on, and the pieces they change
VARIANTS = {
    "epilogue_fast_sigmoid": lambda e: e.activation in ("silu", "gelu", "gelu_tanh", "silu_mul"),
    "epilogue_load_after_mainloop": lambda e: e.residual or e.norm_backward != "none",
    "epilogue_stats_two_segments": lambda e: e.stats != "none",
}


def pieces(shapes, rounds: int, variants=(), only=()) -> None:
    """Each piece's epilogue (those named in ``only``, or all) at each shape; each of ``variants`` (fields of
    ``VARIANTS``) on beside the pieces it changes, checked against the piece without it (max |Δ| / max |out|)."""
    from triton.testing import do_bench

    from norm_fusion_inductor.kernels import tuning

    for shape in shapes:
        M, K, N = (int(v) for v in shape.split("x"))
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
        rows, cols = torch.rand(M, device="cuda") + 0.5, torch.randn(N, device="cuda")
        residual = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        wt = w.t()
        fns = {"cublas": lambda: torch.mm(a, wt)}
        for name, e in PIECES.items():
            if only and name not in only:
                continue
            kw = dict(scale=rows if e.row_norm != "none" else None, shift=rows if e.row_norm == "ln" else None,
                      u=cols if e.row_norm == "ln" else None, bias=cols if e.bias else None,
                      residual=residual if e.residual else None)
            fns[name] = lambda e=e, kw=kw: eg.epilogue_gemm(a, w, epilogue=e, **kw)
            base = fns[name]()  # tunes
            for field in variants:
                if not VARIANTS[field](e):
                    continue

                def variant(e=e, kw=kw, field=field):
                    with tuning.override(**{field: True}):
                        return eg.epilogue_gemm(a, w, epilogue=e, **kw)
                fns[f"{name} +{field[len('epilogue_'):]}"] = variant
                out = variant()
                diffs = [(o.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)
                         for o, b in zip(out, base) if b.numel()]
                print(f"{shape} {name} +{field}: max|d|/max|out| "
                      + ", ".join(f"{d.item():.1e}" for d in diffs) + " against the piece without it")
        t = interleaved_medians(fns, rounds, lambda fn: do_bench(fn, warmup=10, rep=40, return_mode="median"))
        print(f"\n{shape}: ms (x cuBLAS), tuned config each", flush=True)
        for name, ms in t.items():
            print(f"  {name:36s} {ms:.4f} ({ms / t['cublas']:.2f})")
        print("configs:", eg.tuned_configs(), sep="\n")


TOWER_SITES = (  # the recsys towers' regrouped GEMMs (benchmarks/blocks.py), as calibrate.GridSite fields
    ("activation", 262144, 256, 1024, "silu"), ("producer_rms", 262144, 1024, 256),
    ("consumer_ln_gelu", 131072, 512, 1024, "gelu"), ("producer_ln", 131072, 1024, 512),
)


def label_of(cfg: dict) -> str:
    return (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['num_stages']} w{cfg['num_warps']}"
            f"{' flat' if cfg['FLATTEN'] else ''}{' WS' if cfg['WARP_SPECIALIZE'] else ''} x{cfg['CTAS_PER_SM']}")


SITE_FIELDS = {"head_dim": int, "rope": lambda v: bool(int(v)), "head_norm": lambda v: bool(int(v)),
               "rope_interleaved": lambda v: bool(int(v)), "rope_dim": int, "head_gates": lambda v: bool(int(v)),
               "head_center": lambda v: bool(int(v))}


def parse_site(spec: str) -> tuple:
    """(kind, M, K, N, [activation], fields) of "kind:MxKxN[:activation][:field=value ...]"; the fields
    (``SITE_FIELDS``) change the selection's site, e.g. "per_head:16384x4096x4096:rope=1:head_norm=0" (a q
    projection with RoPE alone), ":head_dim=256", ":rope=1:rope_interleaved=1" (GPT-J's pairs) or
    ":rope=1:rope_dim=64" (partial rotary over halves of the first 64 dims); ":head_gates=1": each head's output
    gate after it (Qwen3-Next's q projection); ":head_center=1": the per-head norm a LayerNorm (Cohere's)."""
    kind, shape, *rest = spec.split(":")
    M, K, N = (int(v) for v in shape.split("x"))
    fields = {}
    for part in (p for p in rest if "=" in p):
        name, value = part.split("=", 1)
        if name not in SITE_FIELDS:
            raise SystemExit(f"--sites {spec}: unknown field {name!r} (one of {sorted(SITE_FIELDS)})")
        fields[name] = SITE_FIELDS[name](value)
    return kind, M, K, N, [p for p in rest if "=" not in p], fields


def grid(rounds: int, json_path: str | None, only: list | None = None) -> None:
    """Each config of each grid site (or of the ``only`` sites, "kind:MxKxN[:activation]"), GPU ms by CUDA-graph
    replay, interleaved over ``rounds``."""
    import json

    from norm_fusion_inductor import calibrate, selection
    from norm_fusion_inductor.timing import graph_ms

    device = torch.device("cuda", torch.cuda.current_device())
    sites = []
    chosen = [(kind, M, K, N, act, {}) for kind, M, K, N, *act in TOWER_SITES]
    if only:
        chosen = [parse_site(spec) for spec in only]
    for kind, M, K, N, act, fields in chosen:
        g = calibrate.GridSite(kind if kind != "consumer_ln_gelu" else "activation", M, K, N, *act)
        site = calibrate.epilogue_site(g, device)
        if kind == "consumer_ln_gelu":
            site = dataclasses.replace(site, row_norm="ln")
        sites.append((kind, dataclasses.replace(site, **fields)))
    if not only:
        sites += [(g.kind, calibrate.epilogue_site(g, device)) for g in calibrate.SITES]
    rows = []
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  grid of {len(sites)} sites", flush=True)
    for kind, site in sites:
        run, a, w = selection.epilogue_runner(site)
        epilogue = selection._site_epilogue(site)
        configs = eg._configs(a, epilogue, site.N)
        fns = {}
        start = time.perf_counter()
        for cfg in configs:
            try:
                run("triton", cfg)
                torch.cuda.synchronize()
            except Exception as e:
                print(f"  {label_of(cfg)} failed: {type(e).__name__}: {str(e)[:120]}")
                continue
            fns[label_of(cfg)] = lambda cfg=cfg: run("triton", cfg)
        compile_s = time.perf_counter() - start
        wt = w if site.w_kn else w.t()
        fns["cublas"] = lambda: torch.mm(a, wt)
        t = interleaved_medians(fns, rounds, graph_ms)
        best = min(v for k, v in t.items() if k != "cublas")
        head = ""
        if site.head_dim:
            head = (f" head_dim {site.head_dim}{' rope' if site.rope else ''}{'' if site.head_norm else ' no-norm'}"
                    f"{' interleaved' if site.rope_interleaved else ''}"
                    f"{f' rope_dim {site.rope_dim}' if site.rope_dim else ''}{' gates' if site.head_gates else ''}"
                    f"{' layer-norm' if site.head_center else ''}")
        name = f"{kind} {site.M}x{site.K}x{site.N} {site.activation}{' aux' if site.write_aux else ''}{head}"
        print(f"\n{name}: ms (/ best config), cuBLAS {t['cublas']:.4f}; {len(fns) - 1} configs compiled one by one "
              f"in {compile_s:.1f} s", flush=True)
        for label, ms in sorted(((k, v) for k, v in t.items() if k != "cublas"), key=lambda kv: kv[1]):
            print(f"  {label:34s} {ms:.4f} ({ms / best:.3f})")
        rows.append(dict(kind=kind, M=site.M, K=site.K, N=site.N, activation=site.activation, aux=site.write_aux,
                         head_dim=site.head_dim, rope=site.rope, head_norm=site.head_norm,
                         rope_interleaved=site.rope_interleaved, rope_dim=site.rope_dim, head_gates=site.head_gates,
                         head_center=site.head_center, cublas_ms=t["cublas"], compile_s=compile_s, configs={k: v for k, v in t.items() if k != "cublas"}))
        fns.clear()
        torch.cuda.empty_cache()
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cases", nargs="*")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pieces", action="store_true")
    p.add_argument("--variant", nargs="+", default=[], choices=sorted(VARIANTS),
                   help="with --pieces: these kernel tuning fields on beside the pieces they change")
    p.add_argument("--only", nargs="+", default=[], choices=sorted(PIECES), help="with --pieces: these pieces alone")
    p.add_argument("--grid", action="store_true", help="every config at the calibration grid's sites")
    p.add_argument("--json", help="with --grid: the times as JSON")
    p.add_argument("--sites", nargs="+", help="with --grid: these sites (kind:MxKxN[:activation][:field=value], kind "
                                              "as calibrate.GridSite's or consumer_ln_gelu; fields head_dim, rope, "
                                              "head_norm, rope_interleaved, rope_dim, head_gates) instead of the "
                                              "grid's")
    args = p.parse_args()
    if args.grid:
        grid(args.rounds, args.json, args.sites)
        return 0
    if args.pieces:
        pieces(args.cases or ["131072x512x1024", "262144x256x1024"], args.rounds, args.variant, args.only)
        return 0
    args.cases = args.cases or DEFAULT_CASES
    from triton.testing import do_bench

    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}")
    for case in args.cases:
        shape, name = case.split(":")
        M, K, N = (int(v) for v in shape.split("x"))
        epilogue = EPILOGUES[name]
        dt = torch.bfloat16
        a = torch.randn(M, K, device="cuda", dtype=dt)
        w = torch.randn(N, K, device="cuda", dtype=dt) / K ** 0.5
        tensors = dict(residual=torch.randn(M, N, device="cuda", dtype=dt) if epilogue.residual else None,
                       bias=torch.randn(N, device="cuda") if epilogue.bias else None,
                       scale=torch.rand(M, device="cuda") + 0.5 if epilogue.row_norm != "none" else None,
                       shift=torch.randn(M, device="cuda") if epilogue.row_norm == "ln" else None,
                       u=torch.randn(N, device="cuda") if epilogue.row_norm == "ln" else None)
        configs = eg._configs(a, epilogue, N) + ws_configs(epilogue)
        wt = w.t()
        fns, outs, errors = {"cublas": lambda: torch.mm(a, wt)}, {}, {}
        for i, cfg in enumerate(configs):
            label = (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['num_stages']} w{cfg['num_warps']}"
                     f"{' flat' if cfg['FLATTEN'] else ''}{' WS' if cfg['WARP_SPECIALIZE'] else ''}"
                     f" x{cfg['CTAS_PER_SM']}")

            def fn(cfg=cfg):
                return eg.epilogue_gemm(a, w, epilogue=epilogue, config=cfg, **tensors)
            try:
                out = fn()[0].float()
                torch.cuda.synchronize()
            except Exception as e:
                errors[label] = f"{type(e).__name__}: {str(e)[:160]}"
                continue
            ref = outs.setdefault("ref", out)
            outs[label] = ((out - ref).abs().max() / ref.abs().max()).item()
            fns[label] = fn
        t = interleaved_medians(fns, args.rounds, lambda fn: do_bench(fn, warmup=10, rep=40, return_mode="median"))
        print(f"\n{M}x{K}x{N} {name}: ms (x cuBLAS), max|d|/max|out| vs the first config", flush=True)
        for label, ms in sorted(t.items(), key=lambda kv: kv[1]):
            print(f"  {label:34s} {ms:.4f} ({ms / t['cublas']:.2f})  {outs.get(label, 0):.1e}")
        for label, err in errors.items():
            print(f"  {label:34s} failed: {err}")
        fns = outs = a = w = tensors = None  # the next case's operands are allocated without these
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
