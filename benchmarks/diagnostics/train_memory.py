"""Where a training step's peak memory goes under each compiler (convergence.py's models): memory held between
steps, the step's peak above it, and the bytes autograd saves for the backward in one step.

    python benchmarks/diagnostics/train_memory.py [--models llama bert] [--steps 4]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for path in (ROOT, os.path.join(ROOT, "benchmarks")):
    if path not in sys.path:
        sys.path.insert(0, path)

from convergence import MODELS, batches  # noqa: E402

COMPILERS = {
    "default": {},
    "norm_fusion": dict(backend="norm_fusion"),
    "norm_fusion_never": dict(backend="norm_fusion", options={"norm_fusion": {"policy": "never"}}),
    "norm_fusion_always": dict(backend="norm_fusion", options={"norm_fusion": {"policy": "always"}}),
}


def main() -> int:
    import norm_fusion_inductor as nfi
    from norm_fusion_inductor.hf_models import VOCAB, tiny_model

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["llama"], choices=list(MODELS))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--compilers", nargs="+", default=list(COMPILERS), choices=list(COMPILERS))
    args = p.parse_args()
    mb = 2 ** 20
    print("| model | compiler | held after step 0 MB | held before the last step MB | step peak above held MB | "
          "saved for backward MB (tensors) | sites rewritten |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name in args.models:
        family, kwargs, batch, seq = MODELS[name]
        torch.manual_seed(0)
        state = {k: v.clone() for k, v in tiny_model(family, **kwargs).state_dict().items()}
        data = batches(args.steps, batch, seq, VOCAB, "cuda", masked=family == "bert")
        for cname in args.compilers:
            torch._dynamo.reset()
            nfi.clear_reports()
            torch.cuda.empty_cache()
            model = tiny_model(family, **kwargs).train()
            model.load_state_dict(state)
            model.to("cuda", torch.bfloat16)
            compiled = torch.compile(model, **COMPILERS[cname])
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
            held0 = held = peak = 0
            saved = []
            for step, (ids, labels) in enumerate(data):
                torch.cuda.synchronize()
                if step == 1:
                    held0 = torch.cuda.memory_allocated()
                held = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                optimizer.zero_grad(set_to_none=True)
                if step == len(data) - 1:
                    def pack(t):
                        saved.append(t.numel() * t.element_size())
                        return t
                    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                        loss = compiled(input_ids=ids, labels=labels).loss
                else:
                    loss = compiled(input_ids=ids, labels=labels).loss
                loss.backward()
                optimizer.step()
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated()
            sites = nfi.reports()
            print(f"| {name} | {cname} | {held0 / mb:.0f} | {held / mb:.0f} | {(peak - held) / mb:.0f} | "
                  f"{sum(saved) / mb:.0f} ({len(saved)}) | {sum(s.rewritten for s in sites)} of {len(sites)} |",
                  flush=True)
            del model, compiled, optimizer
    return 0


if __name__ == "__main__":
    sys.exit(main())
