"""Convergence and memory (issue 29): small transformers models trained with AdamW under torch.compile default and
under the plugin, from the same weights on the same batches; the loss curves side by side, how far the plugin's
strays from default's, and each compiler's peak memory over the steps after the first (the first holds the
compile and the plugin's measurements).

    python benchmarks/convergence.py                    # GPU: Llama-style and BERT models, bf16, 200 steps each
    python benchmarks/convergence.py --steps 50 --models llama
    python benchmarks/convergence.py --smoke            # tiny sizes, fp32, a few steps: the script runs (CPU or GPU)

Compilers: ``default``; ``norm_fusion`` (the defaults: fused only where measured faster); ``norm_fusion_always``
(policy "always": every site the rewrites find is fused, whether faster or not, so that the fused kernels are
the ones trained through). The task is learnable (each sequence is a random first half repeated; BERT predicts
15 % masked positions), so the loss falls and a wrong gradient shows. Pass: over the last ``--window`` steps the mean loss of each plugin compiler is
within ``--tolerance`` (1 %) of default's, and its peak memory at most default's + 1 %. Prints a table and, with
``--json``, every loss.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

MODELS = {  # family, tiny_model keyword arguments, batch, sequence length
    "llama": ("llama", dict(hidden=1024, layers=4, intermediate_size=2816, num_key_value_heads=4,
                            max_position_embeddings=1024), 8, 1024),
    "bert": ("bert", dict(hidden=768, layers=4, intermediate_size=3072, max_position_embeddings=512), 16, 512),
}
SMOKE = {
    "llama": ("llama", dict(hidden=64, layers=2), 2, 16),
    "bert": ("bert", dict(hidden=64, layers=2), 2, 16),
}


def batches(steps: int, batch: int, seq: int, vocab: int, device, seed: int = 0, masked: bool = False) -> list:
    """(input ids, labels) [batch, seq] per step: a random first half, repeated (the second half is predictable
    from the first). ``masked`` (an encoder, which sees every position): 15 % of the positions replaced by a mask
    id (vocab − 1, never drawn otherwise) and only those labelled, as BERT's masked-LM task; else (a decoder,
    whose labels are shifted inside the model) the labels are the ids."""
    generator = torch.Generator().manual_seed(seed)
    half = seq // 2
    out = []
    for _ in range(steps):
        first = torch.randint(0, vocab - 1 if masked else vocab, (batch, half), generator=generator)
        ids = torch.cat([first, first, first[:, :seq - 2 * half]], 1)
        labels = ids
        if masked:
            mask = torch.rand(ids.shape, generator=generator) < 0.15
            labels = torch.where(mask, ids, torch.full_like(ids, -100))
            ids = torch.where(mask, torch.full_like(ids, vocab - 1), ids)
        out.append((ids.to(device), labels.to(device)))
    return out


def train(model, data: list, lr: float) -> tuple[list, float]:
    """(loss per step, peak memory in MB over the steps after the first; 0 on the CPU)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    cuda = next(model.parameters()).is_cuda
    for step, (ids, labels) in enumerate(data):
        if step == 1 and cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0
    return losses, peak


def run_model(name: str, spec: tuple, args) -> dict:
    import norm_fusion_inductor as nfi
    from norm_fusion_inductor.hf_models import VOCAB, tiny_model

    family, kwargs, batch, seq = spec
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" and not args.smoke else torch.float32
    torch.manual_seed(0)
    reference = tiny_model(family, **kwargs).train()
    state = {k: v.clone() for k, v in reference.state_dict().items()}
    data = batches(args.steps, batch, seq, VOCAB, device, masked=family == "bert")
    compilers = {"default": {}, "norm_fusion": dict(backend="norm_fusion"),
                 "norm_fusion_always": dict(backend="norm_fusion", options={"norm_fusion": {"policy": "always"}})}
    row = {"model": name, "dtype": str(dtype), "batch": batch, "seq": seq, "steps": args.steps}
    for cname, compile_kwargs in compilers.items():
        torch._dynamo.reset()
        nfi.clear_reports()
        model = tiny_model(family, **kwargs).train()
        model.load_state_dict(state)
        model.to(device, dtype)
        start = time.perf_counter()
        losses, peak = train(torch.compile(model, **compile_kwargs), data, args.lr)
        row[cname] = dict(losses=losses, peak_mb=peak, seconds=time.perf_counter() - start,
                          rewritten=sum(s.rewritten for s in nfi.reports()),
                          sites=len(nfi.reports()))
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    window = min(args.window, args.steps)
    base = statistics.mean(row["default"]["losses"][-window:])
    row["pass"] = True
    for cname in compilers:
        r = row[cname]
        r["final"] = statistics.mean(r["losses"][-window:])
        r["gap"] = (r["final"] - base) / base
        r["peak_ratio"] = r["peak_mb"] / row["default"]["peak_mb"] if row["default"]["peak_mb"] else None
        if cname != "default":
            r["pass"] = abs(r["gap"]) <= args.tolerance and (r["peak_ratio"] is None or r["peak_ratio"] <= 1.01)
            row["pass"] = row["pass"] and r["pass"]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--window", type=int, default=20, help="steps at the end whose mean loss is compared")
    p.add_argument("--tolerance", type=float, default=0.01)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.smoke:
        args.steps, args.window = min(args.steps, 4), min(args.window, 2)
    specs = SMOKE if args.smoke else MODELS
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(f"# {device}  torch {torch.__version__}  {time.strftime('%Y-%m-%d %H:%M')}  steps={args.steps}")
    print("| model | compiler | first loss | mean loss, last steps | vs default | peak MB (vs default) "
          "| sites rewritten | s |")
    print("|---|---|---:|---:|---:|---:|---|---:|")
    rows = []
    for name in args.models:
        row = run_model(name, specs[name], args)
        rows.append(row)
        for cname in ("default", "norm_fusion", "norm_fusion_always"):
            r = row[cname]
            peak = f"{r['peak_mb']:.0f}" + (f" ({r['peak_ratio']:.3f})" if r["peak_ratio"] is not None else "")
            sites = "–" if cname == "default" else f"{r['rewritten']} of {r['sites']}"
            print(f"| {name} | {cname} | {r['losses'][0]:.4f} | {r['final']:.4f} | {r['gap']:+.2%} | {peak} | "
                  f"{sites} | {r['seconds']:.0f} |", flush=True)
    ok = all(row["pass"] for row in rows)
    print("PASS" if ok else "FAIL", f"(loss within {args.tolerance:.0%} of default's over the last {args.window} "
          "steps, peak memory within 1 %)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if ok or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
