"""One training step of a small Llama decoder (transformers' own model code, random weights) compiled with the
norm_fusion backend: forward, loss, backward, optimizer step. Checks loss and gradients against eager and prints
which normalization sites were fused in the training graph. On a GPU it also times the step against
torch.compile default.

    python examples/llama_training_step.py                 # CPU or GPU; needs transformers
    python examples/llama_training_step.py --hidden 1024 --layers 4 --seq 1024
"""

import argparse
import copy

import torch

import norm_fusion_inductor
from norm_fusion_inductor import hf_models


def step(model, optimizer, inputs):
    optimizer.zero_grad(set_to_none=True)
    loss = model(**inputs, labels=inputs["input_ids"]).loss
    loss.backward()
    optimizer.step()
    return loss.detach()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=32)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    model = hf_models.tiny_model("llama", hidden=args.hidden, layers=args.layers).to(device, dtype).train()
    eager = copy.deepcopy(model)
    inputs = hf_models.example_inputs(model, batch=args.batch, seq=args.seq)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    opt_eager = torch.optim.SGD(eager.parameters(), lr=1e-2)

    norm_fusion_inductor.clear_reports()
    # policy "always" on the CPU shows the rewrite (reference op); on a GPU "auto" fuses where it measured faster
    policy = "auto" if device == "cuda" else "always"
    compiled = torch.compile(model, backend="norm_fusion", options={"norm_fusion": {"policy": policy}})
    loss = step(compiled, opt, inputs)
    loss_eager = step(eager, opt_eager, inputs)
    grads = [(p.grad, q.grad) for p, q in zip(model.parameters(), eager.parameters()) if q.grad is not None]
    grad_err = max(((a.double() - b.double()).norm() / b.double().norm()).item() for a, b in grads)
    print(f"device={device} dtype={dtype}: loss {loss.item():.5f} (eager {loss_eager.item():.5f}), "
          f"max rel. gradient error vs eager {grad_err:.2e}")
    tolerance = 1e-4 if dtype == torch.float32 else 5e-2
    assert abs(loss.item() - loss_eager.item()) <= tolerance * abs(loss_eager.item()) and grad_err < tolerance * 10
    for site in norm_fusion_inductor.reports():
        print(" ", site.line()[:240])

    if device == "cuda":
        from triton.testing import do_bench

        default = torch.compile(copy.deepcopy(eager))
        opt_default = torch.optim.SGD(default.parameters(), lr=1e-2)
        t_plugin = do_bench(lambda: step(compiled, opt, inputs), return_mode="median")
        t_default = do_bench(lambda: step(default, opt_default, inputs), return_mode="median")
        print(f"training step: torch.compile default {t_default:.3f} ms, norm_fusion {t_plugin:.3f} ms "
              f"({t_default / t_plugin:.2f}x)")


if __name__ == "__main__":
    main()
