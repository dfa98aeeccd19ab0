"""A site the plugin leaves unfused must compile to exactly the code torch.compile makes without the plugin: the
"never slower" promise at the level of the generated code. On the CPU every site of the older families is unfused
("no fused kernel for device 'cpu'"), so the plugin's passes run, record the sites and must leave the graph as
Inductor would. Those families alone (OLDER_FUSIONS): regrouped normalization, on by default, runs its kernel in the
Triton interpreter here and would rewrite the pre-norm sites."""
import re

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

import norm_fusion_inductor as nfi

from .helpers import OLDER_FUSIONS

M, K, N = 64, 48, 32


def _pre_ln(x, g, beta, w, b):
    return F.linear(F.layer_norm(x, (K,), g, beta, 1e-5), w, b)


def _pre_rms(x, g, beta, w, b):
    return F.rms_norm(x, (K,), g, 1e-6) @ w.t()


def _post_ln(x, g, beta, w, b):  # BERT's output block: LayerNorm(x Wᵀ + b + residual), the residual x[:, :N]
    return F.layer_norm(F.linear(x, w, b) + x[:, :N], (N,), g[:N], beta[:N], 1e-5)


def _launches(fn, *args, **compile_kwargs) -> list[str]:
    torch._dynamo.reset()
    _, code = run_and_get_code(torch.compile(fn, **compile_kwargs), *args)
    # the calls of the generated wrapper: kernels and extern ops, with their buffers (comments dropped)
    lines = re.sub(r"#.*", "", "\n".join(code)).splitlines()
    return [line.strip() for line in lines if re.search(r"\w\(", line) and ("kernel" in line or "extern" in line)]


@pytest.mark.parametrize("block", [_pre_ln, _pre_rms, _post_ln], ids=["pre_ln", "pre_rms", "post_ln"])
def test_unfused_site_compiles_to_the_default_code(block):
    torch.manual_seed(0)
    args = (torch.randn(M, K), torch.rand(K) + 0.5, torch.randn(K), torch.randn(N, K), torch.randn(N))
    default = _launches(block, *args)
    nfi.clear_reports()
    plugin = _launches(block, *args, backend="norm_fusion", options={"norm_fusion": {"fusions": OLDER_FUSIONS}})
    reports = nfi.reports()
    assert reports and not any(r.rewritten for r in reports)  # the passes saw the site and left it
    assert default and plugin == default
