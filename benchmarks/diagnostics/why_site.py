"""Why the selection fuses (or not) one post-norm site (matmul → norm): its measured times and the decision's
reason, on the GPU.

    python benchmarks/diagnostics/why_site.py 65536x2048x256 --norm rms --bias --residual
"""

from __future__ import annotations

import argparse
import json

import torch

from norm_fusion_inductor import selection
from norm_fusion_inductor.config import NormFusionConfig
from norm_fusion_inductor.sites import PostNormSite


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shape", help="MxKxN")
    p.add_argument("--norm", choices=["rms", "ln"], default="rms")
    p.add_argument("--bias", action="store_true")
    p.add_argument("--residual", action="store_true")
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()
    M, K, N = (int(v) for v in args.shape.split("x"))
    site = PostNormSite(M, K, N, getattr(torch, args.dtype), torch.device("cuda"), True, args.bias,
                        norm=args.norm, has_norm_bias=args.norm == "ln", has_residual=args.residual)
    config = NormFusionConfig()
    measured = selection._cached(site, config, "times", selection._measure)  # what choose() then decides on
    print("measured", json.dumps(measured, default=str))
    choice = selection.choose(site, config)
    print("choice", choice.fused, choice.implementation, choice.reason)


if __name__ == "__main__":
    main()
