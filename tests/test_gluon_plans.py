"""Which plans run on the Gluon mainloop (kernels/norm_gemm_gluon.py), decided on the host: no GPU needed. The
kernel itself is compiled for sm_90 by test_sm90_compile.py and checked against float64 by the GPU tests."""

import types

import pytest
import torch

from norm_fusion_inductor.kernels import norm_gemm, norm_gemm_gluon


@pytest.fixture
def sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    return torch.device("cuda", 0)


def _x(device, K, dtype=torch.bfloat16):
    return types.SimpleNamespace(is_cuda=True, dtype=dtype, shape=(4096, K), device=device)


def test_gluon_plans_offered_for_16_bit_inputs_on_sm90(sm90):
    plans = norm_gemm._candidate_plans(_x(sm90, 1024))
    gluon = [p for p in plans if p[0].startswith(norm_gemm.GLUON)]
    assert {p[0] for p in gluon} == {"gluon_in_loop", "gluon_pre_pass"}
    assert len(gluon) == 2 * len(norm_gemm_gluon.CONFIGS)
    assert len(plans) == len(gluon) + 2 * len(norm_gemm._GPU_CONFIGS)  # the Triton mainloop's plans stay


@pytest.mark.parametrize("dtype,K,w_kn,center,reason", [
    (torch.float32, 1024, False, False, "16-bit"),
    (torch.bfloat16, 1024, True, False, "[K, N]"),
    (torch.bfloat16, 64, False, False, "fill"),  # one K step: the 3-stage pipeline has nothing to prefetch
])
def test_gluon_plans_left_out(sm90, dtype, K, w_kn, center, reason):
    plans = norm_gemm._candidate_plans(_x(sm90, K, dtype), center=center, w_kn=w_kn)
    assert not [p for p in plans if p[0].startswith(norm_gemm.GLUON)]
    cfg = norm_gemm_gluon.CONFIGS[0]
    assert reason in norm_gemm_gluon.unsupported_reason(dtype, sm90, K, cfg, "in_loop", center, w_kn)


def test_gluon_layer_norm_in_loop_needs_whole_k_tiles(sm90):
    """The shifted sums read the TMA zero padding as x = 0, i.e. −s: the in-loop LayerNorm plan needs
    K % BLOCK_K == 0; its pre-pass plan and RMSNorm do not."""
    names = {p[0] for p in norm_gemm._candidate_plans(_x(sm90, 1000), center=True) if p[0].startswith("gluon")}
    assert names == {"gluon_pre_pass"}
    names = {p[0] for p in norm_gemm._candidate_plans(_x(sm90, 1000)) if p[0].startswith("gluon")}
    assert names == {"gluon_in_loop", "gluon_pre_pass"}


def test_no_gluon_plans_off_sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    plans = norm_gemm._candidate_plans(_x(torch.device("cuda", 0), 1024))
    assert plans and not [p for p in plans if p[0].startswith(norm_gemm.GLUON)]

