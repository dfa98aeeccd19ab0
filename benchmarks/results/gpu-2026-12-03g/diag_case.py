"""call_b's GPU failures of the model fuzz (16-bit, LayerNorm, |μ| = 1000σ): every output and gradient error of one
case against float64 next to eager's, with the fold's u as fixed (a bit-cast round trip keeps the weight's
rounding) and as before (OLD_U=1), at a smaller M. Usage: python diag_case.py "CASE" M"""
import copy
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
import norm_fusion_inductor as nfi  # noqa: E402
from norm_fusion_inductor import regrouped  # noqa: E402
from norm_fusion_inductor.kernels import epilogue_gemm as eg  # noqa: E402
from tests import fuzz_models as fm  # noqa: E402
from tests.helpers import rel_err  # noqa: E402

case = eval(sys.argv[1], {"torch": torch})
case["m"] = int(sys.argv[2]) if len(sys.argv) > 2 else case["m"]
if os.environ.get("OLD_U"):
    regrouped.column_sums = lambda w, w_kn: w.sum(0 if w_kn else 1, dtype=torch.float32)
eg.fastest_config = fm._drawn_config(case)
model = fm.build(case).to("cuda", case["dtype"])
model64, eager = copy.deepcopy(model).double(), copy.deepcopy(model)
nfi.clear_reports()
compiled = torch.compile(model, backend="norm_fusion", options={"norm_fusion": {"policy": "always"}})
x = fm.make_input(case, "cuda", case["m"])
xs = [x.detach().clone().requires_grad_(True), x.detach().double().requires_grad_(True),
      x.detach().clone().requires_grad_(True)]
outs = [compiled(xs[0]), model64(xs[1]), eager(xs[2])]
g = torch.randn(outs[0].shape, generator=torch.Generator().manual_seed(case["seed"] + 2)).cuda()
for o in outs:
    o.backward(g.to(o.dtype))
print("old u" if os.environ.get("OLD_U") else "fixed u", "M", case["m"], case["dtype"])
print(f"  output {rel_err(outs[0], outs[1]):.2e} eager {rel_err(outs[2], outs[1]):.2e}")
print(f"  input grad {rel_err(xs[0].grad, xs[1].grad):.2e} eager {rel_err(xs[2].grad, xs[1].grad):.2e}")
for (n, p), p64, pe in zip(model.named_parameters(), model64.parameters(), eager.parameters()):
    print(f"  {n} {rel_err(p.grad, p64.grad):.2e} eager {rel_err(pe.grad, p64.grad):.2e}")
for s in nfi.reports():
    print("  site", s.line()[:220])
