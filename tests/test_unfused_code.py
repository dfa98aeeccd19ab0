"""A site the plugin leaves unfused must compile to exactly the code torch.compile makes without the plugin: the
"never slower" promise at the level of the generated code. With policy "never" every family matches its sites,
records them and declines them (on the CPU, policy "auto" would rewrite the pre-norm sites: regrouped
normalization runs its kernel in the Triton interpreter), so the plugin's passes run and must leave the graph as
Inductor would."""
import re

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

import norm_fusion_inductor as nfi

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
    plugin = _launches(block, *args, backend="norm_fusion", options={"norm_fusion": {"policy": "never"}})
    reports = nfi.reports()
    # the passes saw the site (the family that matches it: regrouped for the pre-norms, post-norm after the
    # matmul) and left it
    assert [r.fusion for r in reports] == ["matmul_norm" if block is _post_ln else "regrouped_norm"], reports
    assert not any(r.rewritten for r in reports)
    assert default and plugin == default
