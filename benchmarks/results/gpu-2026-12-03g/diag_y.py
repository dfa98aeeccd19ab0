"""The consumer's output itself (no residual to hide it): y = Σ_i proj_i(norm(x)) of a LayerNorm'd stream with
|μ| up to 1000σ, compiled with policy always, against float64 and eager; fp16/bf16, inference and training."""
import copy
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.getcwd())
from tests import fuzz_models as fm  # noqa: E402
from tests.helpers import rel_err  # noqa: E402


class Y(nn.Module):
    def __init__(self, norm, d, ff, projections):
        super().__init__()
        self.norm, self.p = norm, nn.ModuleList(nn.Linear(d, ff) for _ in range(projections))

    def forward(self, x):
        h = self.norm(x)
        return sum(p(h) for p in self.p)


for dtype in (torch.float16, torch.bfloat16):
    for norm in ("written_layer_norm", "layer_norm"):
        for mean in (0.0, 1000.0):
            for train in (False, True):
                for projections in (1, 3):
                    torch.manual_seed(0)
                    torch._dynamo.reset()
                    model = Y(fm.NORMS[norm](256, 1e-5), 256, 1024, projections).cuda().to(dtype)
                    with torch.no_grad():
                        model.norm.weight.copy_(1 + 0.1 * torch.randn(256))
                    m64 = copy.deepcopy(model).double()
                    x = (torch.randn(2048, 256) + mean).cuda().to(dtype)
                    comp = torch.compile(model, backend="norm_fusion", options={"norm_fusion": {"policy": "always"}})
                    with torch.set_grad_enabled(train):
                        xs = x.clone().requires_grad_(train)
                        out, ref, eager = comp(xs), m64(x.double()), model(x)
                    print(f"{str(dtype)[6:]} {norm} mean {mean:g} {'train' if train else 'infer'} "
                          f"proj {projections}: {rel_err(out, ref):.2e} eager {rel_err(eager, ref):.2e}", flush=True)
