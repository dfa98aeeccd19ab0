"""call_a's model-fuzz failure (fp32 inference, dynamic=True, a NaN output at the second length, 11 tokens after 7):
which variant gives non-finite rows, and which rows. Variants: the fuzz's (policy always, launched from Inductor's
code), the op launch, the plugin compiled statically at 11, plain torch.compile with dynamic=True.
Usage: python diag_nan.py "CASE" (default: the failing case)"""
import copy
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
import norm_fusion_inductor as nfi  # noqa: E402
from norm_fusion_inductor.kernels import epilogue_gemm as eg  # noqa: E402
from tests import fuzz_models as fm  # noqa: E402
from tests.helpers import rel_err  # noqa: E402

CASE = ("{'family': 'pre_norm', 'kinds': ['pre', 'pre'], 'd': 512, 'ff': 512, 'm': 7, 'batch': 1, "
        "'dtype': torch.float32, 'train': False, 'eps': 1e-06, 'bias': False, 'norms': ['layer_norm_no_affine', "
        "'llama_rms_norm', 'gemma_rms_norm'], 'mlps': ['qkv', 'plain'], 'head_dim': 64, 'qk_norm': False, "
        "'rope': 'chunk', 'acts': ['gelu_tanh', 'silu'], 'layout': 'contiguous', 'mean': 0.0, 'seed': 1583591190, "
        "'config': 43, 'dynamic': True, 'm2': 11}")
case = eval(sys.argv[1] if len(sys.argv) > 1 else CASE, {"torch": torch})
eg.fastest_config = fm._drawn_config(case)
model = fm.build(case).to("cuda", case["dtype"]).eval()
model64 = copy.deepcopy(model).double()
VARIANTS = {
    "fuzz (always, direct, dynamic)": (dict(policy="always"), True),
    "op launch (dynamic)": (dict(policy="always", launch="op"), True),
    "older families (dynamic; call_a's code sent these sites there: eps a graph tensor)": (
        dict(policy="always", fusions=[f for f in nfi.FUSIONS if f != "regrouped_norm"]), True),
    "plugin static": (dict(policy="always"), None),
    "plain torch.compile (dynamic)": (None, True),
}
for name, (options, dynamic) in VARIANTS.items():
    torch._dynamo.reset()
    nfi.clear_reports()
    if options is None:
        compiled = torch.compile(model, dynamic=dynamic)
    else:
        compiled = torch.compile(model, backend="norm_fusion", options={"norm_fusion": options}, dynamic=dynamic)
    print(f"== {name}", flush=True)
    for m in (case["m"], case["m2"], 13, 40):
        x = fm.make_input(case, "cuda", m)
        with torch.no_grad():
            try:
                out = compiled(x)
            except Exception as e:
                print(f"  m {m}: raised {type(e).__name__}: {str(e)[:300]}")
                continue
            ref = model64(x.double())
        bad = (~torch.isfinite(out)).reshape(-1, out.shape[-1]).any(-1).nonzero().flatten().tolist()
        err = rel_err(out.nan_to_num(), ref) if bad else rel_err(out, ref)
        print(f"  m {m}: rel err {err:.2e}, non-finite rows {bad[:20]}{'...' if len(bad) > 20 else ''} "
              f"of {out.numel() // out.shape[-1]}", flush=True)
    for s in nfi.reports():
        print("  site", s.line()[:260])
