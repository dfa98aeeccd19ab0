"""The Triton kernels and the custom op on the CPU: kernels under TRITON_INTERPRET=1 (fp32/fp16; the 3.6
interpreter computes bf16 dots wrongly), the op's reference path, fake implementation and autograd."""

import os

import pytest
import torch

from norm_fusion_inductor import ops
from norm_fusion_inductor.kernels import prenorm_matmul

from .helpers import ln_linear_reference64, ln_linear_unfused, rel_err, rms_linear_reference64

interpreter = pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="CPU interpreter tests")
TOL = {torch.float32: 1e-5, torch.float16: 2e-3}


@interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("prologue", prenorm_matmul.PROLOGUES)
@pytest.mark.parametrize("M,K,N", [(37, 48, 40), (16, 16, 16), (50, 72, 8)])
@pytest.mark.parametrize("gamma,bias", [(True, False), (False, True), (True, True), (False, False)])
def test_kernel_matches_float64(dtype, prologue, M, K, N, gamma, bias):
    torch.manual_seed(M * K + N)
    x = torch.randn(M, K, dtype=dtype) * 2 + 0.3
    g = (torch.rand(K) + 0.5).to(dtype) if gamma else None
    w = (torch.randn(N, K) / K**0.5).to(dtype)
    b = torch.randn(N, dtype=dtype) if bias else None
    out, rstd = prenorm_matmul.rms_norm_matmul(x, g, w, b, 1e-5,
                                               plan=(prologue, prenorm_matmul._INTERPRETER_CONFIG))
    ref, ref_rstd = rms_linear_reference64(x, g, w, b, 1e-5)
    assert rel_err(out, ref) < TOL[dtype]
    assert rel_err(rstd, ref_rstd.flatten()) < 1e-6


@interpreter
@pytest.mark.parametrize("prologue", prenorm_matmul.PROLOGUES)
def test_kernel_fp32_norm_weight_with_fp16_input(prologue):
    """Gemma-style sites pass an fp32 γ (1 + w computed in the graph) with 16-bit activations."""
    x = torch.randn(33, 48, dtype=torch.float16)
    g = torch.rand(48) + 1.0
    w = (torch.randn(24, 48) / 48**0.5).half()
    out, _ = prenorm_matmul.rms_norm_matmul(x, g, w, None, 1e-6, plan=(prologue, prenorm_matmul._INTERPRETER_CONFIG))
    assert out.dtype == torch.float16
    assert rel_err(out, rms_linear_reference64(x, g, w, None, 1e-6)[0]) < 2e-3


@interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("prologue", prenorm_matmul.PROLOGUES)
@pytest.mark.parametrize("shift", [0.0, 100.0, 1000.0])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_kernel_within_unfused_error(dtype, prologue, shift, affine):
    """LayerNorm through the mean correction, on rows whose mean is 0, 100 and 1000 times their std: the fused
    error against float64 stays within 2x the unfused path's (+ a floor at fp32/fp16 rounding)."""
    if dtype == torch.float32 and prologue == "pre_pass":
        pytest.skip("not a candidate plan for fp32 LayerNorm (see test_fp32_layer_norm_plans_avoid_pre_pass)")
    torch.manual_seed(int(shift) + affine)
    M, K, N = 37, 80, 40
    x = (torch.randn(M, K) + shift).to(dtype)
    g = (torch.rand(K) + 0.5).to(dtype) if affine else None
    b = torch.randn(K).to(dtype) if affine else None
    w = (torch.randn(N, K) / K**0.5).to(dtype)
    bias = torch.randn(N).to(dtype)
    out, mean, rstd = prenorm_matmul.layer_norm_matmul(x, g, b, w, bias, 1e-5,
                                                       plan=(prologue, prenorm_matmul._INTERPRETER_CONFIG))
    ref, ref_mean, ref_rstd = ln_linear_reference64(x, g, b, w, bias, 1e-5)
    unfused_err = rel_err(ln_linear_unfused(x, g, b, w, bias, 1e-5), ref)
    floor = {torch.float32: 1e-6, torch.float16: 5e-4}[dtype]
    assert rel_err(out, ref) <= max(2 * unfused_err, floor), (rel_err(out, ref), unfused_err)
    assert rel_err(mean, ref_mean.flatten()) < 1e-6 and rel_err(rstd, ref_rstd.flatten()) < 1e-5


@interpreter
def test_fp32_layer_norm_plans_avoid_pre_pass():
    """fp32 LayerNorm: the pre-pass's mean correction cancels to fp32 accumulation error ∝ |μ|/σ (measured here
    3.5x the unfused error at 1000σ), so the tuner only offers the in-loop plan for it."""
    x = torch.randn(16, 32) + 1000
    w = torch.randn(8, 32)
    assert {p[0] for p in prenorm_matmul._candidate_plans(x, center=True)} == {"in_loop"}
    assert {p[0] for p in prenorm_matmul._candidate_plans(x.half(), center=True)} == set(prenorm_matmul.PROLOGUES)
    out, _, _ = prenorm_matmul.layer_norm_matmul(x, None, None, w, None, 1e-5)
    ref = ln_linear_reference64(x, None, None, w, None, 1e-5)[0]
    assert rel_err(out, ref) <= 2 * rel_err(ln_linear_unfused(x, None, None, w, None, 1e-5), ref)


@interpreter
@pytest.mark.parametrize("prologue", prenorm_matmul.PROLOGUES)
def test_kernel_weight_stored_k_by_n(prologue):
    """GPT-2's Conv1D: x @ W with W [K, N], both norms."""
    x = torch.randn(33, 48, dtype=torch.float16) + 2
    g, be = (torch.rand(48) + 0.5).half(), torch.randn(48).half()
    w, b = (torch.randn(40, 48) / 48**0.5).half(), torch.randn(40).half()
    plan = (prologue, prenorm_matmul._INTERPRETER_CONFIG)
    out, _ = prenorm_matmul.rms_norm_matmul(x, g, w.t().contiguous(), b, 1e-6, plan=plan, w_kn=True)
    assert rel_err(out, rms_linear_reference64(x, g, w, b, 1e-6)[0]) < 2e-3
    out, _, _ = prenorm_matmul.layer_norm_matmul(x, g, be, w.t().contiguous(), b, 1e-5, plan=plan, w_kn=True)
    assert rel_err(out, ln_linear_reference64(x, g, be, w, b, 1e-5)[0]) < 2e-3


@interpreter
def test_kernel_writes_every_element():
    """Outputs poisoned with NaN beforehand: the kernel must overwrite every element of out and rstd."""
    x = torch.randn(45, 32)
    w = torch.randn(24, 32)
    for prologue in prenorm_matmul.PROLOGUES:
        for center in (False, True):
            out = torch.full((45, 24), float("nan"))
            rstd = torch.full((45,), float("nan"))
            mean = torch.full((45,), float("nan")) if center else None
            prenorm_matmul._run((prologue, prenorm_matmul._INTERPRETER_CONFIG), x, w, out, rstd, 1e-6, mean=mean)
            assert not out.isnan().any() and not rstd.isnan().any(), (prologue, center)
            assert mean is None or not mean.isnan().any()


@interpreter
def test_op_uses_kernel_under_interpreter(monkeypatch):
    monkeypatch.setenv("NORM_FUSION_INTERPRET", "1")
    calls = []
    real = prenorm_matmul.rms_norm_matmul
    monkeypatch.setattr(prenorm_matmul, "rms_norm_matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = torch.randn(2, 9, 32)
    g, w, b = torch.rand(32) + 0.5, torch.randn(16, 32), torch.randn(16)
    out, rstd = torch.ops.norm_fusion.rms_norm_linear(x, g, w, b, 1e-6)
    ref, ref_rstd = rms_linear_reference64(x.reshape(-1, 32), g, w, b, 1e-6)
    assert calls and rel_err(out, ref) < 1e-5
    assert rstd.shape == (2, 9, 1) and rel_err(rstd.flatten(), ref_rstd.flatten()) < 1e-6


@pytest.mark.parametrize("gamma,bias", [(True, True), (False, False)])
def test_op_reference_path_and_fake(gamma, bias):
    x = torch.randn(3, 5, 16)
    g = torch.rand(16) + 0.5 if gamma else None
    w, b = torch.randn(8, 16), (torch.randn(8) if bias else None)
    out, rstd = torch.ops.norm_fusion.rms_norm_linear(x, g, w, b, 1e-6)
    ref, _ = rms_linear_reference64(x.reshape(-1, 16), g, w, b, 1e-6)
    assert out.shape == (15, 8) and rel_err(out, ref) < 1e-5
    torch.library.opcheck(torch.ops.norm_fusion.rms_norm_linear.default, (x, g, w, b, 1e-6),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    out_t, _ = torch.ops.norm_fusion.rms_norm_linear_tensor_eps(x, g, w, b, torch.tensor(1e-6))
    assert torch.equal(out_t, out)
    torch.library.opcheck(torch.ops.norm_fusion.rms_norm_linear_tensor_eps.default,
                          (x, g, w, b, torch.tensor(1e-6)), test_utils=("test_schema", "test_faketensor"))


def test_layer_norm_op_reference_fake_and_gradients():
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    g = (torch.rand(16, dtype=torch.float64) + 0.5).requires_grad_()
    be = torch.randn(16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, 16, dtype=torch.float64, requires_grad=True)
    b = torch.randn(8, dtype=torch.float64, requires_grad=True)
    op = torch.ops.norm_fusion.layer_norm_linear
    out, mean, rstd = op(x, g, be, w, b, 1e-5)
    assert out.shape == (15, 8) and mean.shape == rstd.shape == (3, 5, 1)
    assert rel_err(out, ln_linear_reference64(x.reshape(-1, 16), g, be, w, b, 1e-5)[0]) < 1e-10
    assert torch.autograd.gradcheck(lambda *a: op(*a, 1e-5)[0], (x, g, be, w, b))
    assert torch.autograd.gradcheck(lambda x, w: op(x, None, None, w, None, 1e-5)[0], (x, w))
    w_kn = w.detach().t().contiguous().requires_grad_()  # Conv1D layout
    assert torch.autograd.gradcheck(lambda *a: op(*a, 1e-5, True)[0], (x, g, be, w_kn, b))
    xs = x.detach().float()
    torch.library.opcheck(op.default, (xs, g.detach().float(), be.detach().float(), w.detach().float(), None, 1e-5),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    torch.library.opcheck(torch.ops.norm_fusion.layer_norm_linear_tensor_eps.default,
                          (xs, None, None, w.detach().float(), None, torch.tensor(1e-5)),
                          test_utils=("test_schema", "test_faketensor"))


def test_op_gradients_float64():
    """gradcheck of the op's autograd formula (float64 runs the reference path)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    g = (torch.rand(6, dtype=torch.float64) + 0.5).requires_grad_()
    w = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: torch.ops.norm_fusion.rms_norm_linear(*a, 1e-6)[0], (x, g, w, b))
    assert torch.autograd.gradcheck(lambda x, w: torch.ops.norm_fusion.rms_norm_linear(x, None, w, None, 1e-6)[0],
                                    (x, w))


def test_supports_reports_reasons():
    if torch.cuda.is_available():
        pytest.skip("CPU reasons")
    x, w = torch.randn(8, 16), torch.randn(8, 16)
    assert "dtype" in prenorm_matmul.supports(x.double(), w.double())
    assert "contiguous" in prenorm_matmul.supports(x.t(), w)
    assert "differs" in prenorm_matmul.supports(x, w.half())
    assert "16-byte" in prenorm_matmul.supports(torch.randn(8, 6), torch.randn(8, 6))
