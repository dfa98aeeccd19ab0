"""A user's first compile: one compiler per fresh process, as someone trying the backend meets it.

``blocks.py`` compiles default and the plugin in one process (default first), so the second compiler finds
Inductor's compile workers started by the first. Here each compiler runs in a process of its own, with its own
empty Inductor, Triton and plugin cache folders, and the seconds of its first call are printed side by side: from
``torch.compile`` (for the plugin, its package's import before it, as the backend's entry point does) to the end
of the first step. Python's bytecode is cached beforehand, as an installed torch has it. ``--warm-pool 0`` runs
the same with ``TORCH_WARM_POOL=0`` (no worker warm-up before tracing: the plugin's backend before it warmed the
pool as Inductor's own backend does).

    python benchmarks/diagnostics/cold_compile.py --blocks recsys_ln_tower llama3_8b_layer --repeats 2
    python benchmarks/diagnostics/cold_compile.py --smoke      # CPU: a tiny tower, the Triton interpreter
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)
COMPILERS = ("default", "norm_fusion")
SMOKE = dict(kind="tower", rows=256, width=64, hidden=128, norm="ln", act="gelu", layers=2)


def child(block: str, compiler: str, smoke: bool) -> None:
    """Runs in the fresh process: build the block, compile it once, print the first call's seconds as JSON."""
    sys.path.insert(0, BENCHMARKS)
    import torch

    import blocks

    spec = SMOKE if smoke else blocks.BLOCKS[block]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model, inputs, _, _ = blocks.build(spec, False, device, dtype, random_embeds=spec["kind"] != "tower")
    kwargs = {} if compiler == "default" else dict(backend="norm_fusion",
                                                   options={"norm_fusion": {"gemm_backends": ("triton",)}})
    start = time.perf_counter()  # from the backend's lookup: the plugin's import and Dynamo's count alike
    if compiler != "default":
        # what torch's backend lookup does through the entry point where the package is installed (on the GPU
        # machine it is on PYTHONPATH, without entry points)
        importlib.import_module("norm_fusion_inductor")
    compiled = torch.compile(model, **kwargs)
    import_s = time.perf_counter() - start
    with torch.no_grad():
        compiled(**inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    first_call_s = time.perf_counter() - start
    print(json.dumps({"first_call_s": first_call_s, "import_s": import_s}), flush=True)


def run_one(block: str, compiler: str, warm_pool: str, smoke: bool, bytecode: str) -> tuple[float, float]:
    """(first call s, of it the import and torch.compile's own call s) of one fresh process."""
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, HOME=folder, TORCHINDUCTOR_CACHE_DIR=os.path.join(folder, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(folder, "triton"), TORCH_WARM_POOL=warm_pool,
                   PYTHONPYCACHEPREFIX=bytecode)
        if smoke:
            env["TRITON_INTERPRET"] = "1"
        proc = subprocess.run([sys.executable, __file__, "--child", block, compiler] + (["--smoke"] if smoke else []),
                              env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{block} {compiler}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["first_call_s"], result["import_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", nargs="*", default=["recsys_ln_tower"])
    p.add_argument("--repeats", type=int, default=1, help="fresh processes per compiler, interleaved")
    p.add_argument("--warm-pool", default="1", choices=("0", "1"), help="TORCH_WARM_POOL in the processes")
    p.add_argument("--smoke", action="store_true", help="a tiny tower on the CPU (Triton interpreter)")
    p.add_argument("--child", nargs=2, metavar=("BLOCK", "COMPILER"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(*args.child, smoke=args.smoke)
    blocks = ["smoke_tower"] if args.smoke else args.blocks
    print(f"| block | TORCH_WARM_POOL | default s | norm_fusion s | ratio |  ({args.repeats} fresh process(es) "
          "each, interleaved; median)")
    print("|---|---:|---:|---:|---:|")
    # Python's bytecode of torch and the plugin, cached once as an installed package has it (the GPU machine's
    # venv keeps none: every fresh process there compiled ~2400 modules from source, 8 s)
    with tempfile.TemporaryDirectory(prefix="cold_compile_pyc_") as bytecode:
        subprocess.run([sys.executable, "-c", "import torch._dynamo, torch._inductor.compile_fx, norm_fusion_inductor"],
                       env=dict(os.environ, PYTHONPYCACHEPREFIX=bytecode), check=True, timeout=600)
        for block in blocks:
            runs = {c: [] for c in COMPILERS}
            for _ in range(args.repeats):
                for compiler in COMPILERS:
                    runs[compiler].append(run_one(block, compiler, args.warm_pool, args.smoke, bytecode))
            d, n = (statistics.median(s for s, _ in runs[c]) for c in COMPILERS)
            each = {c: [f"{s:.2f} ({i:.2f})" for s, i in runs[c]] for c in COMPILERS}
            print(f"| {block} | {args.warm_pool} | {d:.2f} | {n:.2f} | {n / d:.2f}× |  (each, with the import and "
                  f"torch.compile call in brackets: {each['default']} / {each['norm_fusion']})", flush=True)


if __name__ == "__main__":
    main()
