"""call_b's kernel-fuzz failures (per-head norm + RoPE + write_aux, fp32, M = 3; output error 0.6–0.7): each case at
every block config the tuner offers, and at other M with the failing config. Usage: python diag_per_head.py"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from norm_fusion_inductor.kernels import epilogue_gemm as eg  # noqa: E402
from norm_fusion_inductor.kernels.epilogue_gemm import Epilogue  # noqa: E402
from tests import fuzz_regrouped as fr  # noqa: E402

E = Epilogue(row_norm="rms", write_aux=True, head_dim=32, rope=True)
CASES = [dict(family="per_head", epilogue=E, M=3, K=1000, N=64, dtype=torch.float32, w_kn=False,
              layout_a="contiguous", layout_r="sliced", shift=0.0, config=53),
         dict(family="per_head", epilogue=E, M=3, K=64, N=160, dtype=torch.float32, w_kn=False,
              layout_a="contiguous", layout_r="sliced", shift=100.0, config=29)]


def check(case):
    eg.tuned_config = fr._drawn_config(case)
    try:
        return "ok " + fr.check_case(case, "cuda")[1]
    except AssertionError as e:
        return "FAIL " + str(e).split(" in {")[0]
    except Exception as e:
        return f"raised {type(e).__name__}: {str(e)[:150]}"


for case in CASES:
    a = torch.empty(case["M"], case["K"], device="cuda", dtype=case["dtype"])
    configs = eg._configs(a, case["epilogue"])
    print(f"== M {case['M']} K {case['K']} N {case['N']}: {len(configs)} configs; drawn {case['config'] % len(configs)}")
    for i, cfg in enumerate(configs):
        print(f"  config {i} {cfg}: {check(dict(case, config=i))}", flush=True)
    drawn = case["config"] % len(configs)
    for M in (1, 2, 4, 8, 100, 1000):
        print(f"  M {M} config {drawn}: {check(dict(case, M=M))}", flush=True)
    for dtype in (torch.float16, torch.bfloat16):
        print(f"  {dtype} config {drawn}: {check(dict(case, dtype=dtype))}", flush=True)
    print(f"  no write_aux: {check(dict(case, epilogue=Epilogue(row_norm='rms', head_dim=32, rope=True)))}")
    print(f"  no rope: {check(dict(case, epilogue=Epilogue(row_norm='rms', write_aux=True, head_dim=32)))}")
