"""GPU tests of the post-norm epilogue of the GEMM kernel (kernels/epilogue_gemm.py, ``post_norm_gemm``: matmul →
norm, whole rows in a tile): every block config the tuner offers against float64, every flag, and the plugin end
to end. Skipped without CUDA."""

import copy

import pytest
import torch
import torch.nn as nn

import norm_fusion_inductor as nfi
from norm_fusion_inductor.kernels import epilogue_gemm as eg

from .helpers import (LlamaRMSNorm, linear_post_norm_reference64, linear_post_norm_unfused, poison_allocator,
                      rel_err)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _operands(M, K, N, dtype, shift=0.0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    w = (torch.randn(N, K, device="cuda", generator=g) / K**0.5).to(dtype)
    b = torch.randn(N, device="cuda", generator=g).to(dtype)
    r = (torch.randn(M, N, device="cuda", generator=g) + shift).to(dtype)
    gamma = (torch.rand(N, device="cuda", generator=g) + 0.5).to(dtype)
    beta = torch.randn(N, device="cuda", generator=g).to(dtype)
    after = torch.randn(M, N, device="cuda", generator=g).to(dtype)
    return x, w, b, r, gamma, beta, after


def _configs(x, N, layer_norm):
    """The tuning candidates: the GEMM configs with whole rows in a tile, for the heaviest flags (a residual and
    the z store: the shared memory every flag set below fits in)."""
    configs = eg._configs(x, eg.post_norm_epilogue(layer_norm, True, True, True, True), N)
    assert configs and all(c["BLOCK_N"] >= N for c in configs)
    return configs


def _check(cfg, operands, layer_norm, *, bias=True, residual=True, gamma=True, beta=True, write_z=False,
           after=False, w_kn=False, eps_tensor=False, floor=1e-3):
    """One launch against float64, outputs from NaN-poisoned memory: y within twice the unfused path's error (+
    ``floor``), rstd, mean (LayerNorm) and z (``write_z``) checked too."""
    x, w, b, r, g, be, r_after = operands
    b, r, g, be = (t if on else None for t, on in ((b, bias), (r, residual), (g, gamma), (be, beta)))
    r_after = r_after if after else None
    ref_y, ref_z, ref_mean, ref_rstd = linear_post_norm_reference64(x, w, b, r, g, be, 1e-5, layer_norm, r_after)
    unfused_y = linear_post_norm_unfused(x, w, b, r, g, be, 1e-5, layer_norm)
    if r_after is not None:
        unfused_y = unfused_y.to(x.dtype) + r_after
    unfused = rel_err(unfused_y, ref_y)
    eps = torch.tensor([1e-5], device="cuda") if eps_tensor else 1e-5
    poison_allocator()
    y, z, mean, rstd = eg.post_norm_gemm(x, w.t().contiguous() if w_kn else w, b, r, g, be, eps,
                                         layer_norm=layer_norm, write_z=write_z, w_kn=w_kn, residual_after=r_after,
                                         config=cfg)
    err = rel_err(y, ref_y)
    assert not y.isnan().any() and err <= 2 * unfused + floor, (cfg, err, unfused)
    assert not rstd.isnan().any() and rel_err(rstd, ref_rstd.flatten()) < 1e-3, cfg
    assert (mean is not None) == layer_norm and (not layer_norm or rel_err(mean, ref_mean.flatten()) < 1e-3), cfg
    assert (z is not None) == write_z and (not write_z or rel_err(z, ref_z) < 1e-2), cfg
    return err


# each flag on and off across the sets, with both norms (RMSNorm takes a β too)
FLAG_SETS = [
    dict(write_z=True),
    dict(after=True, w_kn=True, gamma=False, beta=False),
    dict(bias=False, residual=False, write_z=True, after=True, eps_tensor=True),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layer_norm", [False, True], ids=["rms", "ln"])
@pytest.mark.parametrize("M,K,N", [(1000, 256, 256), (4096, 512, 128), (2048, 1024, 192), (333, 64, 200),
                                   (777, 128, 24)])
def test_every_config_matches_float64(dtype, layer_norm, M, K, N):
    """Every config the tuner offers (BLOCK_N 64, 128, 256; one and two programs per SM), with the first flag
    set; each flag set on the first and last config."""
    operands = _operands(M, K, N, dtype, seed=M + N)
    configs = _configs(operands[0], N, layer_norm)
    for cfg in configs:
        _check(cfg, operands, layer_norm, **FLAG_SETS[0])
    for cfg in (configs[0], configs[-1]):
        for flags in FLAG_SETS[1:]:
            _check(cfg, operands, layer_norm, **flags)


def test_fp32_operands_and_norm_weights():
    """fp32 inputs (TF32 off: IEEE dots; the halved K tiles) and an fp32 γ, β with bf16 activations."""
    x, w, b, r, gamma, beta, after = _operands(1000, 256, 256, torch.float32, seed=5)
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for layer_norm in (False, True):
            for cfg in _configs(x, 256, layer_norm)[:2]:
                _check(cfg, (x, w, b, r, gamma, beta, after), layer_norm, write_z=True, after=True, floor=1e-5)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow
    x16, w16, b16, r16, _, _, after16 = _operands(1000, 256, 256, torch.bfloat16, seed=6)
    for layer_norm in (False, True):
        cfg = _configs(x16, 256, layer_norm)[0]
        _check(cfg, (x16, w16, b16, r16, gamma, beta, after16), layer_norm)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shift", [100.0, 1000.0])
def test_layer_norm_shifted_rows_within_unfused_error(dtype, shift):
    operands = _operands(2048, 512, 256, dtype, shift=shift, seed=int(shift))
    for cfg in _configs(operands[0], 256, True):
        _check(cfg, operands, True, floor=1e-3)


def test_tuned_config_is_one_of_the_candidates():
    """post_norm_gemm without a config tunes once per shape bucket and epilogue; the choice is one of the
    candidates and is what tuned_for reports (the selection stores it for the direct launch)."""
    x, w, b, r, gamma, beta, _ = _operands(4096, 512, 256, torch.bfloat16, seed=9)
    y, z, mean, rstd = eg.post_norm_gemm(x, w, b, r, gamma, beta, 1e-5, layer_norm=True, write_z=True)
    epilogue = eg.post_norm_epilogue(True, True, True, True, False)
    chosen = eg.tuned_for(4096, 256, 512, torch.bfloat16, False, epilogue)
    assert chosen in _configs(x, 256, True)
    assert rel_err(y, linear_post_norm_reference64(x, w, b, r, gamma, beta, 1e-5, True)[0]) < 1e-2


class BertOutput(nn.Module):
    def __init__(self, d, inner, norm):
        super().__init__()
        self.dense = nn.Linear(inner, d)
        self.norm = nn.LayerNorm(d, eps=1e-12) if norm == "ln" else LlamaRMSNorm(d)
        self.up = nn.Linear(d, inner)

    def forward(self, h, residual):
        y = self.norm(self.dense(h) + residual)
        return self.up(y) + y.sum(-1, keepdim=True)


@pytest.mark.parametrize("norm", ["ln", "rms"])
@pytest.mark.parametrize("launch", ["direct", "op"])
@pytest.mark.parametrize("train", [False, True])
def test_plugin_end_to_end(norm, launch, train):
    torch.manual_seed(0)
    d, inner = 256, 1024  # the post-norm epilogue holds whole rows: N ≤ 256
    m = BertOutput(d, inner, norm).cuda()
    with torch.no_grad():
        m.norm.weight.uniform_(0.5, 1.5)
    m64 = copy.deepcopy(m).double()
    m = m.bfloat16()
    h = torch.randn(8, 512, inner, device="cuda").bfloat16().requires_grad_(train)
    res = torch.randn(8, 512, d, device="cuda").bfloat16()
    h64 = h.detach().double().requires_grad_(train)
    nfi.clear_reports()
    c = torch.compile(m, backend="norm_fusion",
                      options={"norm_fusion": {"policy": "always", "fusions": ("matmul_norm",), "launch": launch}})
    with torch.set_grad_enabled(train):
        c(h, res)
        poison_allocator()
        out = c(h, res)
    sites = [s for s in nfi.reports() if s.rewritten]
    assert len(sites) == 1 and sites[0].implementation.startswith("fused_triton"), [s.line() for s in nfi.reports()]
    ref = m64(h64, res.double())
    assert rel_err(out, ref) < 1e-2
    if train:
        # bias gradients sum 4096 bf16 rows: eager bf16 is off by ~2 % there too, so the bound is eager's error
        eager = copy.deepcopy(m)
        h_eager = h.detach().clone().requires_grad_()
        grad = torch.randn_like(out)
        eager(h_eager, res).backward(grad)
        out.backward(grad)
        ref.backward(grad.double())
        pairs = [(h.grad, h_eager.grad, h64.grad)]
        pairs += [(p.grad, pe.grad, p64.grad) for p, pe, p64 in zip(m.parameters(), eager.parameters(),
                                                                     m64.parameters())]
        for fused_grad, eager_grad, ref_grad in pairs:
            assert rel_err(fused_grad, ref_grad) <= max(1e-2, 1.5 * rel_err(eager_grad, ref_grad))
    torch._dynamo.reset()


