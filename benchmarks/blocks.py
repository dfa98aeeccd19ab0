"""The regrouped-normalization benchmark: whole blocks, inference and training step, torch.compile default,
max-autotune and this plugin side by side in one process (do_bench medians, the compilers interleaved), against
the block's speed-of-light.

    python benchmarks/blocks.py                                  # every block, H200 sizes
    python benchmarks/blocks.py --blocks recsys_ln_tower --modes inference --json out.json
    python benchmarks/blocks.py --smoke                          # tiny sizes, CPU or GPU: the script runs
    python benchmarks/blocks.py --mode reduce-overhead           # every compiler with CUDA graphs

Speed-of-light: max(FLOPs / 790 TFLOP/s, minimal bytes / 4.3 TB/s), the H200's measured bf16 matmul rate and
copy bandwidth; FLOPs count the matmuls (and attention), bytes the block's input and output once and every
weight once (training: three times the FLOPs, the activations' bytes three times and the weights' three times:
read, gradient written, read by the optimizer's view of it).

Blocks (issue 24): two recommendation towers of two layers each, x + W2 act(W1 norm(x) + b1) + b2 (the second
layer's norm statistics can come from the first layer's W2 epilogue), and one transformers layer of each of BERT-base,
GPT-2-medium, Llama-3-8B and a Qwen3-1.7B-like config (random weights, a 128-token vocabulary so that the head
does not dominate).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from e2e import LossInside, bench, make_step, rel_err

PEAK_FLOPS, PEAK_BYTES = 790e12, 4.3e12


class Tower(nn.Module):
    """One recommendation-tower layer: x + fc2(act(fc1(norm(x))))."""

    def __init__(self, width: int, hidden: int, norm: str, act: str):
        super().__init__()
        self.norm = nn.LayerNorm(width) if norm == "ln" else nn.RMSNorm(width)
        self.fc1, self.fc2 = nn.Linear(width, hidden), nn.Linear(hidden, width)
        self.act = {"gelu": F.gelu, "silu": F.silu, "relu": F.relu}[act]

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class TowerStack(nn.Module):
    def __init__(self, layers: int, **kw):
        super().__init__()
        self.layers = nn.ModuleList(Tower(**kw) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


BLOCKS = {
    "recsys_ln_tower": dict(kind="tower", rows=131072, width=512, hidden=1024, norm="ln", act="gelu", layers=2),
    "recsys_rms_tower": dict(kind="tower", rows=262144, width=256, hidden=1024, norm="rms", act="silu", layers=2),
    "bert_base_layer": dict(kind="hf", family="bert", hidden=768, batch=32, seq=512,
                            config=dict(intermediate_size=3072, num_attention_heads=12, max_position_embeddings=512)),
    "gpt2_medium_layer": dict(kind="hf", family="gpt2", hidden=1024, batch=8, seq=1024,
                              config=dict(n_inner=4096, n_head=16, n_positions=1024)),
    "llama3_8b_layer": dict(kind="hf", family="llama", hidden=4096, batch=8, seq=2048,
                            config=dict(intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                                        max_position_embeddings=4096)),
    "qwen3_1p7b_layer": dict(kind="hf", family="qwen3", hidden=2048, batch=4, seq=2048,
                             config=dict(intermediate_size=6144, num_attention_heads=16, num_key_value_heads=8,
                                         head_dim=128, max_position_embeddings=4096)),
    # QK-norm relative to its q/k projection: twice the 1.7B layer's work per token on the norm side (issue 26)
    "qwen3_8b_layer": dict(kind="hf", family="qwen3", hidden=4096, batch=4, seq=2048,
                           config=dict(intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8,
                                       head_dim=128, max_position_embeddings=4096)),
    # Gemma3-4B's sizes: sandwich norms, (1 + w) per-head QK-norm at head_dim 256, sliding-window attention (issue 26)
    "gemma3_4b_layer": dict(kind="hf", family="gemma3", hidden=2560, batch=4, seq=2048,
                            config=dict(intermediate_size=10240, num_attention_heads=8, num_key_value_heads=4,
                                        head_dim=256, sliding_window=1024, max_position_embeddings=4096)),
    # Qwen3_5TextConfig's default sizes, one full-attention layer: its q projection also computes each head's
    # output gate (chunked apart), (1 + w) QK-norms at head_dim 256 and RoPE over the first 64 dims of each head
    "qwen3_5_layer": dict(kind="hf", family="qwen3_5", hidden=4096, batch=4, seq=2048,
                          config=dict(intermediate_size=12288, num_attention_heads=16, num_key_value_heads=4,
                                      head_dim=256, max_position_embeddings=4096)),
    # Gemma4TextConfig's default sizes (transformers with Gemma 4): RMSNorm written with pow(., -0.5), sandwich
    # norms, one full-attention layer (heads of 512: its QK-norm stays unfused); per-layer inputs off, since they
    # need token ids and the block runs on embeddings
    "gemma4_layer": dict(kind="hf", family="gemma4", hidden=2304, batch=4, seq=2048,
                         config=dict(intermediate_size=9216, num_attention_heads=8, num_key_value_heads=4,
                                     head_dim=256, global_head_dim=512, sliding_window=512,
                                     max_position_embeddings=4096, hidden_size_per_layer_input=0)),
    # issue 27's first compiles for the other tested families at real sizes: GLM-4-9B (RoPE over half of each
    # head, neighbouring pairs; sandwich norms), OLMo-2-7B (post-norm blocks, full-width q/k norms), Gemma-2-9B
    # (sandwich norms, heads of 256), HunYuan-7B-like (per-head q/k norms after RoPE), Command R+ (per-head
    # LayerNorm q/k norms before the interleaved RoPE; parallel blocks)
    "glm4_9b_layer": dict(kind="hf", family="glm4", hidden=4096, batch=4, seq=2048,
                          config=dict(intermediate_size=13696, num_attention_heads=32, num_key_value_heads=2,
                                      head_dim=128, max_position_embeddings=4096)),
    "olmo2_7b_layer": dict(kind="hf", family="olmo2", hidden=4096, batch=4, seq=2048,
                           config=dict(intermediate_size=11008, num_attention_heads=32, num_key_value_heads=32,
                                       max_position_embeddings=4096)),
    "gemma2_9b_layer": dict(kind="hf", family="gemma2", hidden=3584, batch=4, seq=2048,
                            config=dict(intermediate_size=14336, num_attention_heads=16, num_key_value_heads=8,
                                        head_dim=256, max_position_embeddings=4096)),
    "hunyuan_7b_layer": dict(kind="hf", family="hunyuan", hidden=4096, batch=4, seq=2048,
                             config=dict(intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                                         head_dim=128, max_position_embeddings=4096)),
    "command_r_plus_layer": dict(kind="hf", family="cohere_qk", hidden=12288, batch=2, seq=2048,
                                 config=dict(intermediate_size=33792, num_attention_heads=96, num_key_value_heads=8,
                                             max_position_embeddings=4096)),
}
SMOKE = {
    "recsys_ln_tower": dict(BLOCKS["recsys_ln_tower"], rows=64, width=32, hidden=64),
    "recsys_rms_tower": dict(BLOCKS["recsys_rms_tower"], rows=64, width=32, hidden=64),
    "llama3_8b_layer": dict(kind="hf", family="llama", hidden=64, batch=2, seq=16, config={}),
}


def build(spec: dict, train: bool, device: str, dtype: torch.dtype, random_embeds: bool = False):
    """(model, inputs, speed-of-light ms, labels) of a block (labels: a transformers model's targets where its
    inputs are embeddings, else None)."""
    torch.manual_seed(0)
    labels = None
    if spec["kind"] == "tower":
        model = TowerStack(spec["layers"], width=spec["width"], hidden=spec["hidden"], norm=spec["norm"],
                           act=spec["act"]).to(device, dtype)
        x = torch.randn(spec["rows"], spec["width"], device=device, dtype=dtype, requires_grad=train)
        inputs = {"x": x}
        flops = 4 * spec["rows"] * spec["width"] * spec["hidden"] * spec["layers"]
        io_bytes = 2 * x.numel() * x.element_size()
    else:
        from norm_fusion_inductor import hf_models

        model = hf_models.tiny_model(spec["family"], hidden=spec["hidden"], layers=1, vocab_size=128,
                                     **spec["config"]).to(device, dtype)
        inputs = hf_models.example_inputs(model, batch=spec["batch"], seq=spec["seq"])
        if random_embeds:  # distinct rows, as a real vocabulary gives; the 128-token one repeats rows
            generator = torch.Generator().manual_seed(2)
            embeds = torch.randn(spec["batch"], spec["seq"], spec["hidden"], generator=generator) * 0.02
            labels, inputs = inputs["input_ids"], {"inputs_embeds": embeds.to(device, dtype)}
        tokens = spec["batch"] * spec["seq"]
        linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
        linear += sum(m.weight.numel() for m in model.modules() if type(m).__name__ == "Conv1D")
        heads_dim = spec["hidden"]
        attention = 4 * spec["batch"] * spec["seq"] ** 2 * heads_dim * (0.5 if spec["family"] != "bert" else 1.0)
        flops = 2 * tokens * linear + attention
        io_bytes = 2 * tokens * spec["hidden"] * torch.empty((), dtype=dtype).element_size()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    model.train(train)
    if train:
        flops, io_bytes, weight_bytes = 3 * flops, 3 * io_bytes, 3 * weight_bytes
    sol_ms = max(flops / PEAK_FLOPS, (io_bytes + weight_bytes) / PEAK_BYTES) * 1e3
    return model, inputs, sol_ms, labels


CONTROLS = ("default_again", "norm_fusion_never")


def run_block(name: str, spec: dict, train: bool, args) -> dict:
    import norm_fusion_inductor as nfi

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model, inputs, sol_ms, labels = build(spec, train, device, dtype, args.random_embeds)
    if train and spec["kind"] == "tower":
        model = LossInside(model)  # the loss compiled with the block, for every compiler alike
    graphs = args.mode == "reduce-overhead"  # every compiler replays CUDA graphs: no host time per step
    default = dict(mode="reduce-overhead") if graphs else {}
    compilers = {"default": default}
    if "max-autotune" in args.backends and device == "cuda":
        compilers["max_autotune"] = dict(mode="max-autotune" if graphs else "max-autotune-no-cudagraphs")
    options = {"policy": args.policy}  # the default fusions, as a user gets them
    if args.min_speedup is not None:
        options["min_speedup"] = args.min_speedup
    options.update(args.plugin_option)

    def plugin(**changes):  # the backend takes Inductor options beside its own, not a mode with them
        return dict(backend="norm_fusion", options={"norm_fusion": {**options, **changes},
                                                    **({"triton.cudagraphs": True} if graphs else {})})

    compilers["norm_fusion"] = plugin(gemm_backends=tuple(args.gemm_backends))
    if "norm_fusion_triton" in args.backends:  # the Triton GEMMs alone, beside the best per GEMM
        compilers["norm_fusion_triton"] = plugin(gemm_backends=("triton",))
    # controls: the same default compiled twice (how far two identical compiles differ in this process), and
    # the plugin's passes with policy "never" (default's graph, the passes run, nothing measured)
    if "default_again" in args.backends:
        compilers["default_again"] = dict(default)
    if "norm_fusion_never" in args.backends:
        compilers["norm_fusion_never"] = plugin(policy="never")
    row = {"block": name, "train": train, "sol_ms": sol_ms, "dtype": str(dtype)}
    eager = make_step(model, inputs, train, labels)()
    fns = {}
    for cname, kwargs in compilers.items():
        torch._dynamo.reset()
        nfi.clear_reports()
        step = make_step(torch.compile(model, **kwargs), inputs, train, labels, cudagraphs=graphs)
        profiler = cProfile.Profile() if args.compile_profile and cname == "norm_fusion" else None
        before = nfi.report.seconds()
        phases_before = compile_phases() if args.compile_phases else None
        start = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        out = step()
        if device == "cuda":
            torch.cuda.synchronize()
        row[f"compile_s_{cname}"] = time.perf_counter() - start
        if phases_before is not None:
            row[f"phases_{cname}"] = {k: v - phases_before.get(k, 0.0) for k, v in compile_phases().items()}
        if cname.startswith("norm_fusion"):  # of it, the plugin's pass by phase
            row[f"pass_s_{cname}"] = nfi.report.seconds_since(before)
        if profiler is not None:
            profiler.disable()
            row["compile_profile"] = compile_profile(profiler)
            if args.json:  # the whole profile, for pstats
                profiler.dump_stats(f"{args.json}.{name}.{'train' if train else 'inference'}.compile.prof")
        row[f"err_{cname}"] = rel_err(out, eager)
        if cname.startswith("norm_fusion"):
            row["sites" + cname[len("norm_fusion"):]] = [(s.rewritten, s.fusion, s.shape, s.reason)
                                                         for s in nfi.reports()]
        fns[cname] = step
    row.update({f"t_{k}": v for k, v in bench(fns, device, args.rounds).items()})
    for cname, step in fns.items():  # again after the timed calls: state kept between calls (a cache) shows here
        row[f"err_{cname}"] = max(row[f"err_{cname}"], rel_err(step(), eager))
    if args.profile and device == "cuda":
        row["kernels"] = {cname: kernel_times(step) for cname, step in fns.items()}
    if args.host and device == "cuda":
        row["host_ms"] = {cname: host_ms(step) for cname, step in fns.items()}
        row["host_profile"] = host_profile(fns["norm_fusion"])
    best = min(row[f"t_{c}"] for c in compilers if not c.startswith("norm_fusion") and c not in CONTROLS)
    row["speedup_vs_best"] = best / row["t_norm_fusion"]
    row["fused_vs_sol"] = row["t_norm_fusion"] / sol_ms
    return row


def kernel_times(step, steps: int = 5) -> dict:
    """Per-kernel breakdown: mean GPU ms per step of each kernel name over `steps` profiled steps ("by_name"), and
    the kernels of the last step in launch order ("in_order": [name, ms], the ones over 20 µs) to tell calls of
    one kernel apart (which GEMM is which)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for event in prof.key_averages():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.self_device_time_total > 0:
            times[event.key] = times.get(event.key, 0.0) + event.self_device_time_total / 1e3 / steps
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                      and e.self_device_time_total > 0), key=lambda e: e.time_range.start)
    last = kernels[len(kernels) - len(kernels) // steps:]
    return {"by_name": dict(sorted(times.items(), key=lambda kv: -kv[1])),
            "in_order": [[e.name, e.self_device_time_total / 1e3] for e in last
                         if e.self_device_time_total > 20]}


def host_ms(step, steps: int = 50) -> float:
    """Host ms per step: steps queued back to back without waiting for the GPU (a step whose host time exceeds
    its GPU time is host-bound, whatever its kernels cost)."""
    step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    host = (time.perf_counter() - start) / steps * 1e3
    torch.cuda.synchronize()
    return host


def host_profile(step, steps: int = 20, top: int = 25) -> str:
    """cProfile of ``steps`` steps: the functions with the most own host time."""
    step()
    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def print_kernels(row: dict, top: int = 14) -> None:
    """Each compiler's heaviest kernels, ms per step, and the total; then one step's kernels in launch order."""
    for cname, kernels in row["kernels"].items():
        times = kernels["by_name"]
        print(f"  kernels of {cname}: total {sum(times.values()):.3f} ms", flush=True)
        for key, ms in list(times.items())[:top]:
            print(f"    {ms:8.3f}  {key[:110]}", flush=True)
        print(f"  one step of {cname}, in launch order (kernels over 20 us):", flush=True)
        for key, ms in kernels["in_order"]:
            print(f"    {ms:8.3f}  {key[:90]}", flush=True)


def _number_option(text: str) -> tuple:
    name, _, value = text.partition("=")
    return name, float(value)


def compile_phases() -> dict:
    """Seconds so far in each of Inductor's and Dynamo's timed phases (``dynamo_timed``), summed over compiles."""
    from torch._dynamo.utils import compilation_time_metrics

    return {k: sum(v) for k, v in compilation_time_metrics.items()}


def print_phases(row, min_s: float = 0.05) -> None:
    """The timed phases of each compiler's first call, side by side, those over ``min_s`` in any."""
    names = [k[len("phases_"):] for k in row if k.startswith("phases_")]
    keys = sorted({p for n in names for p, s in row["phases_" + n].items() if s >= min_s},
                  key=lambda p: -max(row["phases_" + n].get(p, 0.0) for n in names))
    print("  compile phases s: " + " / ".join(names), flush=True)
    for p in keys:
        print(f"    {p}: " + " / ".join(f"{row['phases_' + n].get(p, 0.0):.2f}" for n in names), flush=True)


def compile_profile(profiler, top: int = 40) -> str:
    """Where the first compile's seconds go: the plugin's measurement and tuning, Quack's JIT, Inductor, by
    cumulative time."""
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).sort_stats("cumulative")
    # triton_kernel_wrap: Inductor's analysis of each user-defined launch (it generates the kernel's TTIR)
    stats.print_stats("norm_fusion_inductor|quack|cutlass|subprocess|do_bench|compile_fx|async_compile|"
                      "triton/compiler|autotune|triton_kernel_wrap", top)
    return text.getvalue()


def warm_process(ready_workers: bool = False) -> None:
    """One compile of a function no block shares a kernel with (a cumulative product), run once; with
    ``ready_workers``, then wait until Inductor's compile workers are up (otherwise a short compile right after
    may still compile its kernels on the main thread)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.compile(lambda x: torch.cumprod(x.cos(), dim=0).amax())(torch.rand(37, 3, device=device))
    torch._dynamo.reset()
    if ready_workers:
        from torch._inductor.async_compile import AsyncCompile

        wait = getattr(AsyncCompile, "wait_pool_ready", None)
        if wait is None:
            raise SystemExit("--ready-workers: this torch has no AsyncCompile.wait_pool_ready")
        wait()


def best_of(row: dict) -> float:
    return min(v for k, v in row.items() if k.startswith("t_") and not k.startswith("t_norm_fusion")
               and k[2:] not in CONTROLS)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--blocks", nargs="*")
    p.add_argument("--modes", nargs="*", choices=["inference", "train"], default=["inference", "train"])
    p.add_argument("--backends", nargs="*", default=["default", "max-autotune", "norm_fusion"],
                   help="also norm_fusion_triton (the Triton GEMMs alone) and the controls default_again (default "
                        "compiled a second time) and norm_fusion_never (the plugin with policy never)")
    p.add_argument("--policy", default="auto")
    p.add_argument("--mode", default="default", choices=["default", "reduce-overhead"],
                   help="reduce-overhead: every compiler replays CUDA graphs (no host time per step; the plugin "
                        "then prices an op-launched GEMM, Quack's, at its GPU time alone)")
    p.add_argument("--min-speedup", type=float, help="the plugin's min_speedup option (default: the config's)")
    p.add_argument("--plugin-option", nargs="*", default=[], metavar="NAME=NUMBER", type=_number_option,
                   help="other numeric options of the plugin (NormFusionConfig), e.g. measure_budget_s=30")
    p.add_argument("--gemm-backends", nargs="+", default=["triton", "quack"],
                   help="the plugin's gemm_backends option (norm_fusion_triton in --backends adds a Triton-only run)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    p.add_argument("--profile", action="store_true", help="print each compiler's per-kernel GPU time per step")
    p.add_argument("--host", action="store_true",
                   help="print each compiler's host time per step and a cProfile of the plugin's steps")
    p.add_argument("--compile-phases", action="store_true",
                   help="print the seconds of Inductor's timed phases in each compiler's first call")
    p.add_argument("--compile-profile", action="store_true",
                   help="print a cProfile of the plugin's first compile (where its seconds go)")
    p.add_argument("--random-embeds", action="store_true",
                   help="transformers blocks read random N(0, 0.02²) input embeddings instead of token ids of the "
                        "128-token vocabulary (whose 128 distinct rows repeat through the first GEMMs)")
    p.add_argument("--warm-process", action="store_true",
                   help="compile and run an unrelated function first, so that the process's one-time costs "
                        "(Inductor's compile workers, imports) fall on neither compiler's first compile")
    p.add_argument("--ready-workers", action="store_true",
                   help="--warm-process, then wait until Inductor's compile workers are ready: both compilers "
                        "compile their kernels in the workers (without it, a first compile may use the main thread)")
    p.add_argument("--tuning", nargs="*", default=[], metavar="FIELD=0|1",
                   help="kernel tuning fields changed for the whole run (norm_fusion_inductor.kernels.tuning)")
    args = p.parse_args()
    from norm_fusion_inductor import report

    blocks = SMOKE if args.smoke else BLOCKS
    if args.warm_process or args.ready_workers:
        warm_process(args.ready_workers)
    if args.tuning:
        from norm_fusion_inductor.kernels import tuning

        tuning.adopt(**{k: bool(int(v)) for k, v in (item.split("=") for item in args.tuning)})
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    import triton

    print(f"# {device}  torch {torch.__version__}  triton {triton.__version__}  python {platform.python_version()}"
          f"  {time.strftime('%Y-%m-%d %H:%M')}  policy={args.policy}  mode={args.mode}"
          + (f"  min_speedup={args.min_speedup}" if args.min_speedup is not None else "")
          + "".join(f"  {name}={value}" for name, value in args.plugin_option)
          + ("  inputs: random embeddings" if args.random_embeds else "")
          + (f"  tuning: {' '.join(args.tuning)}" if args.tuning else ""))
    print("| block | mode | SOL ms | default ms | max-autotune ms | norm_fusion ms | speedup vs best | fused/SOL | "
          "sites rewritten | err vs eager |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
    rows = []
    for name in args.blocks or list(blocks):
        for train in [mode == "train" for mode in args.modes]:
            row = run_block(name, blocks[name], train, args)
            rows.append(row)
            fused = sum(s[0] for s in row["sites"])
            mat = f"{row['t_max_autotune']:.3f}" if "t_max_autotune" in row else "–"
            print(f"| {name} | {'train step' if train else 'inference'} | {row['sol_ms']:.3f} | "
                  f"{row['t_default']:.3f} | {mat} | {row['t_norm_fusion']:.3f} | {row['speedup_vs_best']:.3f} | "
                  f"{row['fused_vs_sol']:.2f} | {fused} of {len(row['sites'])} | {row['err_norm_fusion']:.1e} |",
                  flush=True)
            if "t_norm_fusion_triton" in row:
                print(f"  norm_fusion with the Triton GEMMs alone: {row['t_norm_fusion_triton']:.3f} ms "
                      f"({best_of(row) / row['t_norm_fusion_triton']:.3f}x the best baseline)", flush=True)
            controls = [f"{c} {row['t_' + c]:.3f} ms ({row['t_default'] / row['t_' + c]:.3f}x default)"
                        for c in CONTROLS if "t_" + c in row]
            if controls:
                print("  controls: " + ", ".join(controls), flush=True)
            print("  compile s: " + ", ".join(f"{k[10:]} {v:.2f}" for k, v in row.items()
                                              if k.startswith("compile_s_")), flush=True)
            for key in (k for k in row if k.startswith("pass_s_")):
                print(f"  of it, {key[7:]}'s {report.format_seconds(row[key])}", flush=True)
            for s in row["sites"]:
                print(f"  site {'REWRITTEN' if s[0] else 'unfused'} {s[1]} {s[2]}: {s[3][:900]}", flush=True)
            if "kernels" in row:
                print_kernels(row)
            if any(k.startswith("phases_") for k in row):
                print_phases(row)
            if "compile_profile" in row:
                print(row["compile_profile"], flush=True)
            if "host_ms" in row:
                print("  host ms per step: " + ", ".join(f"{c} {ms:.3f}" for c, ms in row["host_ms"].items()))
                print(row["host_profile"], flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
