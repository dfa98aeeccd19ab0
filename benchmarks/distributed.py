"""A block's training under data parallelism on the GPUs of one host (issue 30): DDP (the whole model compiled) or
FSDP2 (``fully_shard`` and ``compile`` per block, as torchtitan does) over NCCL, torch.compile default against the
plugin under the same parallelism. Per compiler: the median step time, tokens (rows) per second, peak memory, the
first step's time (the compile), the sites each rank rewrote, and the loss curve over ``--steps`` AdamW steps
against one GPU training on all ranks' batches with the same compiler (gradients accumulated, the same mean).
Each rank cycles through its own fixed batches, so the loss falls as the block fits them.

    python benchmarks/distributed.py --block llama3_8b_layer --parallelism fsdp2 --steps 100 --json out.json
    python benchmarks/distributed.py --block recsys_rms_tower --parallelism ddp --gpus 1   # one GPU: the code runs

Blocks and their per-rank sizes are blocks.py's. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and its
siblings, set here for every process this script starts).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from blocks import BLOCKS, build  # noqa: E402
from e2e import LossInside  # noqa: E402

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TIMED_FROM = 3  # steps before this one compile and warm up


def _compile_kwargs(compiler: str, gemm_backends) -> dict:
    if compiler == "default":
        return {}
    return dict(backend="norm_fusion", options={"norm_fusion": {"gemm_backends": tuple(gemm_backends)}})


def _model(spec: dict):
    """(module whose forward returns the loss, its repeated blocks, kind)."""
    model, _, _, _ = build(spec, True, "cuda", torch.bfloat16, random_embeds=True)
    if spec["kind"] == "tower":
        model = LossInside(model)
        return model, list(model.block.layers), "tower"
    inner = getattr(model, "model", None) or getattr(model, "bert", None) or getattr(model, "transformer")
    layers = getattr(inner, "layers", None) or getattr(inner, "h", None) or inner.encoder.layer
    return model, list(layers), "hf"


def _batches(spec: dict, rank: int, count: int) -> list:
    """``count`` fixed batches of ``rank`` (keyword inputs of the loss-returning module)."""
    g = torch.Generator().manual_seed(1000 + rank)
    out = []
    for _ in range(count):
        if spec["kind"] == "tower":
            x = torch.randn(spec["rows"], spec["width"], generator=g)
            out.append({"x": x.to("cuda", torch.bfloat16)})
        else:
            embeds = torch.randn(spec["batch"], spec["seq"], spec["hidden"], generator=g) * 0.02
            labels = torch.randint(0, 128, (spec["batch"], spec["seq"]), generator=g)
            out.append({"inputs_embeds": embeds.to("cuda", torch.bfloat16), "labels": labels.cuda()})
    return out


def _loss(model, kind: str, batch: dict) -> torch.Tensor:
    return model(**batch) if kind == "tower" else model(**batch).loss


def _train(rank: int, world: int, args, compiler: str, port: int, queue, reference: bool = False) -> None:
    """One rank's run (``reference``: one process on GPU 0 training on every rank's batches)."""
    import norm_fusion_inductor as nfi

    torch.cuda.set_device(0 if reference else rank)
    if not reference:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        spec = BLOCKS[args.block]
        model, layers, kind = _model(spec)
        kwargs = _compile_kwargs(compiler, args.gemm_backends)
        if reference or args.parallelism == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            wrapped = model if reference else DistributedDataParallel(model)
            step_model = torch.compile(wrapped, **kwargs)
        else:
            from torch.distributed.fsdp import fully_shard

            for layer in layers:
                fully_shard(layer)
                layer.compile(**kwargs)
            fully_shard(model)
            step_model = model
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        ranks = range(world) if reference else [rank]
        batches = {r: _batches(spec, r, args.batches) for r in ranks}
        losses, step_ms = [], []
        compile_s = 0.0
        for step in range(args.steps):
            if step == TIMED_FROM:
                torch.cuda.reset_peak_memory_stats()
            torch.cuda.synchronize()
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device="cuda")
            for r in ranks:
                loss = _loss(step_model, kind, batches[r][step % args.batches]) / len(ranks)
                loss.backward()
                total += loss.detach().float()
            optimizer.step()
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            if step == 0:
                compile_s = elapsed
            elif step >= TIMED_FROM:
                step_ms.append(elapsed * 1e3)
            if not reference:
                dist.all_reduce(total)
                total /= world
            losses.append(total.item())
        tokens = spec["rows"] if kind == "tower" else spec["batch"] * spec["seq"]
        queue.put(dict(rank=rank, losses=losses, step_ms=statistics.median(step_ms) if step_ms else None,
                       tokens_per_s=tokens * len(ranks) / (statistics.median(step_ms) / 1e3) if step_ms else None,
                       peak_gb=torch.cuda.max_memory_allocated() / 1e9, compile_s=compile_s,
                       sites=[(s.rewritten, s.fusion, s.shape, s.reason) for s in nfi.reports()]))
    finally:
        if not reference:
            dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(world: int, args, compiler: str, reference: bool) -> list:
    context = mp.get_context("spawn")
    queue = context.Queue()
    port = _free_port()
    procs = [context.Process(target=_train, args=(rank, world, args, compiler, port, queue, reference))
             for rank in range(1 if reference else world)]
    for p in procs:
        p.start()
    try:
        return sorted((queue.get(timeout=args.timeout) for _ in procs), key=lambda r: r["rank"])
    finally:
        for p in procs:
            p.join(timeout=60)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--block", default="llama3_8b_layer", choices=sorted(BLOCKS))
    p.add_argument("--parallelism", default="fsdp2", choices=["ddp", "fsdp2"])
    p.add_argument("--gpus", type=int, help="ranks (default: every visible GPU)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batches", type=int, default=4, help="fixed batches per rank, cycled")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--compilers", nargs="+", default=["default", "norm_fusion"])
    p.add_argument("--gemm-backends", nargs="+", default=["triton", "quack"])
    p.add_argument("--no-reference", action="store_true", help="skip the one-GPU run on every rank's batches")
    p.add_argument("--timeout", type=float, default=900, help="seconds to wait for a rank's result")
    p.add_argument("--json")
    args = p.parse_args()
    for name, value in NO_MULTICAST.items():
        os.environ.setdefault(name, value)
    if not torch.cuda.is_available():
        raise SystemExit("distributed.py trains on GPUs over NCCL; none is visible")
    world = args.gpus or torch.cuda.device_count()
    print(f"# {torch.cuda.get_device_name()} x{world}  torch {torch.__version__}  {args.block}  {args.parallelism}  "
          f"{args.steps} steps", flush=True)
    print("| compiler | run | step ms | tokens/s | peak GB | first step s | loss first → last | sites rewritten |")
    print("|---|---|---:|---:|---:|---:|---|---|")
    rows = {}
    for compiler in args.compilers:
        runs = {f"{args.parallelism} x{world}": _spawn(world, args, compiler, False)}
        if not args.no_reference:
            runs["one GPU, every batch"] = _spawn(world, args, compiler, True)
        for name, results in runs.items():
            r0 = results[0]
            rewritten = [sum(s[0] for s in r["sites"]) for r in results]
            print(f"| {compiler} | {name} | {r0['step_ms']:.3f} | {r0['tokens_per_s']:.0f} | "
                  f"{max(r['peak_gb'] for r in results):.2f} | {r0['compile_s']:.1f} | {r0['losses'][0]:.4f} → "
                  f"{r0['losses'][-1]:.4f} | {rewritten} of {[len(r['sites']) for r in results]} |", flush=True)
        rows[compiler] = runs
        if len(runs) == 2:
            par, ref = (runs[k][0]["losses"] for k in runs)
            rel = [abs(a - b) / abs(b) for a, b in zip(par, ref)]
            print(f"  {compiler}: loss vs one GPU: last step {rel[-1]:.2e} relative, worst step {max(rel):.2e}",
                  flush=True)
    if "default" in rows and "norm_fusion" in rows:
        key = f"{args.parallelism} x{world}"
        d, f = rows["default"][key][0], rows["norm_fusion"][key][0]
        print(f"  norm_fusion / default under {key}: step {d['step_ms'] / f['step_ms']:.3f}x, peak memory "
              f"{max(r['peak_gb'] for r in rows['norm_fusion'][key]) / max(r['peak_gb'] for r in rows['default'][key]):.3f}x",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"block": args.block, "parallelism": args.parallelism, "world": world, "runs": rows,
                       "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
