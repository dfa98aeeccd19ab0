"""A small BERT encoder (transformers' own model code, random weights) in inference with the norm_fusion backend:
checks the output against eager and prints every normalization site with the reason it was or was not fused.
BERT normalizes *after* each sublayer (post-norm): the norm's output feeds the next sublayer's matmuls and the next
residual add, so the regrouped rewrite has each reader normalize the stream itself (the matmuls in their epilogues,
the next residual add's producer GEMM on load) and the normalized tensor is not written. On the GPU the default
policy fuses a site only where it measures faster; on the CPU the example forces every rewrite (reference ops).

    python examples/bert_inference.py          # CPU or GPU; needs transformers
    python examples/bert_inference.py --batch 8 --seq 128
"""

import argparse

import torch

import norm_fusion_inductor
from norm_fusion_inductor import hf_models


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    model = hf_models.tiny_model("bert", hidden=128, layers=2).to(device, dtype)
    inputs = hf_models.example_inputs(model, batch=args.batch, seq=args.seq)
    policy = "auto" if device == "cuda" else "always"  # CPU: show the rewrite with the reference op
    result = norm_fusion_inductor.explain(model, example_kwargs=inputs, policy=policy)
    with torch.no_grad():
        out, ref = result.compiled(**inputs).logits, model(**inputs).logits  # no second compile
    err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
    print(f"device={device} dtype={dtype}: rel. error vs eager {err:.2e}")
    assert err < (1e-5 if dtype == torch.float32 else 2e-2)
    print(result)


if __name__ == "__main__":
    main()
