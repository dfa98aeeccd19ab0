"""Command line: ``python -m norm_fusion_inductor explain MODEL`` and ``python -m norm_fusion_inductor calibrate``.

explain:
Compiles a model with the plugin and prints every normalization site next to a matmul: its kind, fused or not,
the implementation and the reason. MODEL is a tiny HuggingFace family built from a small config (random
weights, nothing downloaded: see ``hf_models.FAMILIES``), or ``--config`` names any transformers config
(a local path or a hub id in the local cache).

    python -m norm_fusion_inductor explain llama
    python -m norm_fusion_inductor explain gpt2 --train --json sites.json
    python -m norm_fusion_inductor explain --config ./my-model-dir --device cuda --dtype bfloat16
    python -m norm_fusion_inductor explain bert --compare-compile     # also times torch.compile default

calibrate: measures the cost model's constants (``cost_model.py``) for this CUDA GPU model (sm_90+; minutes). It
times cuBLAS, a copy and each GEMM backend's epilogue GEMM on a fixed grid of regrouped sites, fits the
constants, prints measured against fitted times and writes them where the cost model reads them for this GPU
model (``<cache folder>/calibration/<GPU name>.json``; a measured file overrides the committed H200 table).
Needs scipy.

    python -m norm_fusion_inductor calibrate                          # the grid on Triton (and Quack if installed)
    python -m norm_fusion_inductor calibrate --quick --out /tmp/cal.json   # a smoke test, written elsewhere
    python -m norm_fusion_inductor calibrate --backends triton
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def _parser() -> argparse.ArgumentParser:
    from .calibrate import QUICK_SITES, SITES
    from .config import GEMM_BACKENDS, POLICIES
    from .hf_models import FAMILIES

    parser = argparse.ArgumentParser(prog="python -m norm_fusion_inductor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    ex = commands.add_parser("explain", help="compile a model and report its normalization sites")
    ex.add_argument("model", nargs="?", choices=sorted(FAMILIES), help="a tiny HuggingFace model family")
    ex.add_argument("--config", help="a transformers config: local path or cached hub id (instead of MODEL)")
    ex.add_argument("--train", action="store_true", help="match the training graph (forward + backward)")
    ex.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ex.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                    help="default: bfloat16 on CUDA, float32 on CPU")
    ex.add_argument("--policy", choices=POLICIES, default="auto")
    ex.add_argument("--hidden", type=int, default=64, help="hidden size of a tiny family model")
    ex.add_argument("--layers", type=int, default=2)
    ex.add_argument("--batch", type=int, default=2)
    ex.add_argument("--seq", type=int, default=12)
    ex.add_argument("--json", help="also write the sites as JSON to this file")
    ex.add_argument("--compare-compile", action="store_true",
                    help="also compile with torch.compile's default backend and print both compile times")
    cal = commands.add_parser("calibrate", help="measure the cost model's constants for this GPU model (minutes)",
                              description="Times a fixed grid of regrouped GEMM sites on this CUDA GPU, fits the "
                                          "cost model's constants and writes them where the cost model reads them "
                                          "for this GPU model.")
    cal.add_argument("--quick", action="store_true",
                     help=f"{len(QUICK_SITES)} sites instead of {len(SITES)}: a smoke test, its constants loosely "
                          "determined (best with --out)")
    cal.add_argument("--backends", nargs="+", choices=GEMM_BACKENDS,
                     help="the epilogue GEMM backends to time (default: triton, and quack where quack-kernels is "
                          "installed); a backend not timed keeps the committed constants, else has none")
    cal.add_argument("--out", help="write the calibration file here instead of <cache folder>/calibration/"
                                   "<GPU name>.json, where the cost model reads it")
    cal.add_argument("--cache-dir", help="the cache folder (default ~/.cache/norm_fusion_inductor): compiles with "
                                         "this norm_fusion option cache_dir read the file written there")
    traces = commands.add_parser("trace-patterns", help="write the shipped pattern traces for this torch version "
                                               "(developers: after a change to patterns/norm_forms.py or tracing.py)",
                        description="Traces every pattern afresh and writes patterns/traced/torch-<version>.json, "
                                    "read instead of tracing (about 1.5 s per process) where its pattern sources "
                                    "match.")
    traces.add_argument("--out", help="write the file here instead")
    return parser


def explain_command(args) -> int:
    from . import hf_models, report
    from .explain import explain

    if (args.model is None) == (args.config is None):
        raise SystemExit("explain: give a model family or --config, not both or neither")
    model = hf_models.model_from_config(args.config) if args.config else hf_models.tiny_model(
        args.model, hidden=args.hidden, layers=args.layers)
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32"))
    model = model.to(args.device, dtype).train(args.train)
    inputs = hf_models.example_inputs(model, batch=args.batch, seq=args.seq)

    def default_compile_s() -> float:
        torch._dynamo.reset()
        start = time.perf_counter()
        with torch._inductor.config.patch(force_disable_caches=True), torch.set_grad_enabled(args.train):
            torch.compile(model)(**inputs)
        return time.perf_counter() - start

    if args.compare_compile:
        # the process's first compile pays one-time costs (imports, Inductor's own set-up): not ours, not default's
        default_compile_s()
        from .patterns import trace_all

        start = time.perf_counter()
        trace_all()
        print(f"pattern tracing (once per process): {time.perf_counter() - start:.1f} s")
        torch._dynamo.reset()
    result = explain(model, example_kwargs=inputs, train=args.train, policy=args.policy)
    name = args.config or args.model
    print(f"{name} ({'training' if args.train else 'inference'}, {dtype}, {args.device}): {result}")
    print(f"compile + first run with norm_fusion: {result.compile_s:.1f} s; of it the plugin's "
          f"{report.format_seconds(result.pass_seconds)}")
    if args.compare_compile:
        default_s = default_compile_s()
        print(f"compile + first run with torch.compile default: {default_s:.1f} s "
              f"(norm_fusion: {result.compile_s / default_s:.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": name, "train": args.train, "dtype": str(dtype), "device": args.device,
                       "compile_s": result.compile_s, "sites": result.as_dicts()}, f, indent=1)
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "explain":
        return explain_command(args)
    if args.command == "calibrate":
        from . import calibrate

        return calibrate.command(quick=args.quick, backends=args.backends, out=args.out, cache_dir=args.cache_dir)
    if args.command == "trace-patterns":
        from .patterns import trace_all, tracing

        path = tracing.write_shipped_traces(trace_all, args.out)
        print(f"wrote {path} ({len(tracing._codes(path, shipped=True))} patterns)")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
