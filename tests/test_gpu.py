"""GPU tests: the compiled Triton kernel and the plugin end to end on CUDA. Skipped without CUDA. The plugin runs
the prologue pre-norm families alone (OLDER_FUSIONS): regrouped normalization, on by default, would take these
sites first (test_regrouped.py)."""

import copy

import pytest
import torch
import torch.nn as nn

import norm_fusion_inductor as nfi
from norm_fusion_inductor.kernels import norm_gemm

from .helpers import (OLDER_FUSIONS, LlamaRMSNorm, ln_linear_reference64, ln_linear_unfused, rel_err,
                      rms_linear_reference64)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-3}


def _poison_allocator(nbytes=1 << 28):
    """Fill memory the caching allocator will hand out next with NaN, so unwritten outputs cannot pass."""
    junk = torch.full((nbytes // 4,), float("nan"), device="cuda")
    del junk


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("M,K,N", [(4096, 1024, 1024), (1000, 264, 520), (77, 4096, 128)])
@pytest.mark.parametrize("gamma,bias", [(False, True), (True, True)])
@pytest.mark.parametrize("prologue", norm_gemm.ALL_PROLOGUES)
def test_kernel_matches_float64(dtype, M, K, N, gamma, bias, prologue):
    if dtype == torch.float32 and prologue.startswith(norm_gemm.GLUON):
        pytest.skip("the Gluon mainloop takes 16-bit inputs")
    x = torch.randn(M, K, device="cuda", dtype=dtype) * 3 + 0.5
    g = (torch.rand(K, device="cuda") + 0.5).to(dtype) if gamma else None
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(dtype)
    b = torch.randn(N, device="cuda", dtype=dtype) if bias else None
    plan = norm_gemm.tuned_plan(x, w, g, b, 1e-6, prologues=(prologue,))
    _poison_allocator()
    out, rstd = norm_gemm.rms_norm_matmul(x, g, w, b, 1e-6, plan=plan)
    ref, ref_rstd = rms_linear_reference64(x, g, w, b, 1e-6)
    cfg = plan
    assert not out.isnan().any() and not rstd.isnan().any(), f"unwritten output (NaN poison), configs {cfg}"
    assert rel_err(out, ref) < TOL[dtype], f"out err {rel_err(out, ref):.2e}, configs {cfg}"
    assert rel_err(rstd, ref_rstd.flatten()) < 1e-5, f"rstd err {rel_err(rstd, ref_rstd.flatten()):.2e}"


@pytest.mark.parametrize("prologue", ["gluon_in_loop", "gluon_pre_pass"])
def test_gluon_repeated_launches_read_their_own_operands(prologue):
    """After the first launch the compiled Gluon kernel is called directly (kernels.launch.cached_launch): every
    call must still read its own operands and write its own poisoned outputs."""
    from norm_fusion_inductor.kernels import launch, norm_gemm_gluon

    cfg = norm_gemm_gluon.CONFIGS[0]
    launch.LAUNCHERS.clear()
    for _ in range(3):
        x = torch.randn(1000, 768, device="cuda", dtype=torch.bfloat16) * 3 + 0.5
        g = (torch.rand(768, device="cuda") + 0.5).bfloat16()
        w = (torch.randn(776, 768, device="cuda") / 768**0.5).bfloat16()
        _poison_allocator()
        out, rstd = norm_gemm.rms_norm_matmul(x, g, w, None, 1e-6, plan=(prologue, cfg))
        ref, ref_rstd = rms_linear_reference64(x, g, w, None, 1e-6)
        assert rel_err(out, ref) < TOL[torch.bfloat16] and rel_err(rstd, ref_rstd.flatten()) < 1e-5
    assert launch.LAUNCHERS  # launches 2 and 3 went through the cached launcher


@pytest.mark.parametrize("prologue", norm_gemm.PROLOGUES)
def test_kernel_fp32_norm_weight_with_bf16_input(prologue):
    """Gemma-style sites: γ = 1 + w in fp32 with bf16 activations."""
    x = torch.randn(2048, 512, device="cuda", dtype=torch.bfloat16)
    g = torch.rand(512, device="cuda") + 1.0
    w = (torch.randn(384, 512, device="cuda") / 512**0.5).bfloat16()
    plan = norm_gemm.tuned_plan(x, w, g, None, 1e-6, prologues=(prologue,))
    out, _ = norm_gemm.rms_norm_matmul(x, g, w, None, 1e-6, plan=plan)
    assert out.dtype == torch.bfloat16
    assert rel_err(out, rms_linear_reference64(x, g, w, None, 1e-6)[0]) < 1e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("prologue", norm_gemm.ALL_PROLOGUES)
@pytest.mark.parametrize("shift", [0.0, 100.0, 1000.0])
def test_layer_norm_kernel_within_unfused_error(dtype, prologue, shift):
    """Issue 3's numerics target on the tensor cores: rows with mean 0, 100σ, 1000σ, with every block config the
    tuner may pick for the prologue (the in-loop one was miscompiled in two configs until its masked branch
    left the K % BLOCK_K == 0 kernels)."""
    M, K, N = 4096, 1024, 768
    x = (torch.randn(M, K, device="cuda") + shift).to(dtype)
    g = (torch.rand(K, device="cuda") + 0.5).to(dtype)
    b = torch.randn(K, device="cuda").to(dtype)
    w = (torch.randn(N, K, device="cuda") / K**0.5).to(dtype)
    bias = torch.randn(N, device="cuda").to(dtype)
    ref, ref_mean, ref_rstd = ln_linear_reference64(x, g, b, w, bias, 1e-5)
    unfused = rel_err(ln_linear_unfused(x, g, b, w, bias, 1e-5), ref)
    plans = [p for p in norm_gemm._candidate_plans(x, center=True) if p[0] == prologue]
    assert plans
    for plan in plans:
        _poison_allocator()
        out, mean, rstd = norm_gemm.layer_norm_matmul(x, g, b, w, bias, 1e-5, plan=plan)
        assert not out.isnan().any(), plan
        assert rel_err(out, ref) <= max(2 * unfused, 5e-3), (rel_err(out, ref), unfused, plan)
        assert rel_err(mean, ref_mean.flatten()) < 1e-5 and rel_err(rstd, ref_rstd.flatten()) < 1e-4, plan


def _assert_grads_match(out, ref, x, x64, m, m64, tol=2e-2):
    """Backpropagate one random gradient through both models; input and parameter gradients within ``tol``."""
    grad = torch.randn_like(out)
    out.backward(grad)
    ref.backward(grad.double())
    assert rel_err(x.grad, x64.grad) < tol
    for p, p64 in zip(m.parameters(), m64.parameters()):
        assert rel_err(p.grad, p64.grad) < tol


class Block(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.norm = LlamaRMSNorm(d)
        self.q, self.k = nn.Linear(d, n, bias=False), nn.Linear(d, n, bias=True)

    def forward(self, x):
        h = self.norm(x)
        return self.q(h) * self.k(h)


def test_layer_norm_plugin_end_to_end_training():
    torch.manual_seed(0)
    m = nn.Sequential(nn.LayerNorm(1024), nn.Linear(1024, 512)).cuda().bfloat16()
    m64 = nn.Sequential(nn.LayerNorm(1024), nn.Linear(1024, 512)).cuda().double()
    m64.load_state_dict(m.state_dict())
    x = (torch.randn(8, 512, 1024, device="cuda") + 3).bfloat16().requires_grad_()
    x64 = x.detach().double().requires_grad_()
    nfi.clear_reports()
    out = torch.compile(m, backend="norm_fusion",
                        options={"norm_fusion": {"policy": "always", "fusions": OLDER_FUSIONS}})(x)
    ref = m64(x64)
    assert [s.rewritten for s in nfi.reports()] == [True]
    assert rel_err(out, ref) < 1e-2
    _assert_grads_match(out, ref, x, x64, m, m64)
    torch._dynamo.reset()


@pytest.mark.parametrize("policy", ["always", "auto"])
def test_plugin_end_to_end_training(policy):
    torch.manual_seed(0)
    d, n = 1024, 512
    m = Block(d, n).cuda().bfloat16()
    m.norm.weight.data.uniform_(0.5, 1.5)
    m64 = Block(d, n).cuda().double()
    m64.load_state_dict(m.state_dict())
    x = torch.randn(8, 1024, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    x64 = x.detach().double().requires_grad_()
    nfi.clear_reports()
    c = torch.compile(m, backend="norm_fusion", options={"norm_fusion": {"policy": policy, "fusions": OLDER_FUSIONS}})
    out = c(x)
    ref = m64(x64)
    sites = nfi.reports()
    assert len(sites) == 1
    if policy == "always":
        assert sites[0].rewritten and sites[0].implementation == "fused_triton (direct launch)"
    assert rel_err(out, ref) < 1e-2
    _assert_grads_match(out, ref, x, x64, m, m64)
    torch._dynamo.reset()


def _launch_graph(norm, M, K, N, bias=True):
    """The direct-launch graph the pass inserts for one site, traced with fake tensors as in the pass."""
    from norm_fusion_inductor import ops

    with torch._subclasses.FakeTensorMode():
        x = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
        g = torch.empty(K, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(N, K, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(N, device="cuda", dtype=torch.bfloat16) if bias else None
    norm_params = (g,) if norm == "rms" else (g, g)
    graphs = {}
    for prologue in norm_gemm.PROLOGUES:
        plan = (prologue, norm_gemm._GPU_CONFIGS[0])
        graphs[prologue] = ops.trace_direct_launch(norm, (x, *norm_params, w, b, 1e-6, False), plan)
    return graphs


@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_direct_launch_writes_only_its_outputs(norm):
    """Inductor's analysis of the kernels (TTIR) must see that they write only out/rstd/mean: anything else
    marked as mutated would be copied before every launch (a full copy of x)."""
    for prologue, gm in _launch_graph(norm, 4096, 1024, 512).items():
        launches = [n for n in gm.graph.nodes if n.target is torch.ops.higher_order.triton_kernel_wrapper_functional]
        assert launches, prologue
        for n in launches:
            cloned = set(n.kwargs["tensors_to_clone"])
            assert cloned <= {"out_ptr", "rstd_ptr", "mean_ptr"}, (prologue, cloned)


class NormLinears(nn.Module):
    def __init__(self, norm, d, n):
        super().__init__()
        self.norm = LlamaRMSNorm(d) if norm == "rms" else nn.LayerNorm(d)
        self.q, self.k = nn.Linear(d, n, bias=False), nn.Linear(d, n, bias=True)

    def forward(self, x):
        h = self.norm(x)
        return self.q(h) * self.k(h)


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("mainloop", ["triton", "gluon"])
def test_direct_launch_end_to_end(norm, mode, train, mainloop, monkeypatch, tmp_path):
    """The kernels launched from Inductor's generated code (no call of the fused op left), also under CUDA
    graphs; outputs and gradients against float64. The tuner is offered one mainloop's plans: the Triton kernels
    are launched by Inductor itself, the Gluon one through its thin launch op (W·γ, u, v compiled by Inductor
    around it)."""
    from torch._inductor.utils import run_and_get_code

    from norm_fusion_inductor import selection

    candidates = norm_gemm._candidate_plans
    monkeypatch.setattr(norm_gemm, "_candidate_plans", lambda *a, **k: [
        p for p in candidates(*a, **k) if p.gluon == (mainloop == "gluon")])
    monkeypatch.setattr(selection, "_MEMORY", {})
    monkeypatch.setattr(norm_gemm, "_TUNED", {})
    torch.manual_seed(0)
    d, n = 1024, 768
    m = NormLinears(norm, d, n).cuda().bfloat16()
    with torch.no_grad():
        m.norm.weight.uniform_(0.5, 1.5)
    m64 = NormLinears(norm, d, n).cuda().double()
    m64.load_state_dict(m.state_dict())
    x = (torch.randn(4, 512, d, device="cuda") + 1).bfloat16().requires_grad_(train)
    x64 = x.detach().double().requires_grad_(train)
    nfi.clear_reports()
    options = {"norm_fusion": {"policy": "always", "fusions": OLDER_FUSIONS, "cache_dir": str(tmp_path)}}
    if mode == "reduce-overhead":  # torch.compile takes mode or options, not both
        options["triton.cudagraphs"] = True
    c = torch.compile(m, backend="norm_fusion", options=options)
    with torch.set_grad_enabled(train):
        _, code = run_and_get_code(c, x)
        for _ in range(2):  # CUDA graphs: the first call warms up, the second records, the third replays
            _poison_allocator()
            out = c(x)
    assert [s.implementation for s in nfi.reports()] == ["fused_triton (direct launch)"]
    forward_code = code[0]
    assert ("gluon_norm_gemm" if mainloop == "gluon" else "norm_gemm_kernel") in forward_code
    assert "norm_fusion.rms_norm_linear" not in forward_code
    assert "norm_fusion.layer_norm_linear" not in forward_code
    ref = m64(x64)
    assert rel_err(out, ref) < 1e-2
    if train:
        _assert_grads_match(out, ref, x, x64, m, m64)
    torch._dynamo.reset()


@pytest.mark.parametrize("norm", ["rms_weightless", "ln"])
def test_scaled_norm_folded_into_gamma_on_gpu(norm):
    """T5's final norm × d_model^-0.5 → lm_head: the scale becomes an fp32 γ the kernel takes with bf16 x."""
    torch.manual_seed(0)
    d = 512
    norm_module = LlamaRMSNorm(d, weight=False) if norm == "rms_weightless" else nn.LayerNorm(d)
    m = nn.Sequential(norm_module, nn.Linear(d, 384, bias=False)).cuda()
    m64 = copy.deepcopy(m).double()
    m = m.bfloat16()
    x = torch.randn(4096, d, device="cuda").bfloat16()

    def fn(module, x):
        return module[1](module[0](x) * d**-0.5)

    nfi.clear_reports()
    out = torch.compile(lambda x: fn(m, x), backend="norm_fusion",
                        options={"norm_fusion": {"policy": "always", "fusions": OLDER_FUSIONS}})(x)
    assert [s.implementation for s in nfi.reports()] == ["fused_triton (direct launch)"]
    assert rel_err(out, fn(m64, x.double())) < 1e-2
    torch._dynamo.reset()


@pytest.mark.parametrize("position, norm", [("pre", "ln"), ("post", "rms")])
def test_compiled_check_child_times_both_graphs(position, norm, tmp_path):
    """compiled_check's child process (measure_block.measure_matmul), for real: it compiles the site's subgraph
    both ways, the plugin's graph fuses the site (else it fails), and both times come back; its tuned plan lands in
    the shared choice cache where the parent finds it."""
    from norm_fusion_inductor import selection

    site = selection.MatmulSite(M=16384, K=1024, N=256 if position == "post" else 1024, dtype=torch.bfloat16,
                                device=torch.device("cuda", torch.cuda.current_device()), has_norm_weight=True,
                                has_bias=True, norm=norm, has_norm_bias=norm == "ln", position=position,
                                has_residual=position == "post")
    times = selection._measure_compiled_block(site, nfi.NormFusionConfig(cache_dir=str(tmp_path)))
    assert set(times) == {"fused_ms", "compiled_ms"} and all(0 < t < 100 for t in times.values()), times
    saved = (tmp_path / "choices.json").read_text()
    assert selection._key(site) + "|plan" in saved
